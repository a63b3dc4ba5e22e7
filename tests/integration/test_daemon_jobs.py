"""DAEMON jobs on real agent hosts: one instance on every UP host, a host that joins gets one,
a host drained for maintenance has its instance stopped and started again when it is back; the
job's status says where none runs and why; the job ends only when stopped whole."""

from __future__ import annotations

import json

import pytest

from peloton.model.daemon import bound_host
from tests.integration.helpers import processes_of

pytestmark = pytest.mark.integration

DAEMON = """name: node-agent
type: DAEMON
defaultConfig:
  resource: {cpuLimit: 0.1, memLimitMb: 16, diskLimitMb: 10}
  command: {value: 'echo "on $(hostname) as $PELOTON_INSTANCE_ID"; sleep 600'}
"""


def test_a_daemon_follows_hosts_that_join_and_drain(pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:3:cpu=2,mem_mb=1024,disk_mb=1000")
    for stage in ("admit", "entitle", "place", "launch"):
        p.start(stage, wait=False)
    p.start_agent("agent-0")
    p.start_agent("agent-1")  # agent-2 joins later
    (p.home / "daemon.yaml").write_text(DAEMON)
    made = p.ctl("job", "create", "/test", str(p.home / "daemon.yaml"))
    assert made.returncode == 0, made.stderr
    job = made.stdout.split()[1]  # "Job <id> created"

    def running() -> dict[str, int]:
        return {bound_host(t.spec): t.instance for t in p.store.tasks_of_job(job) if t.state == "RUNNING"}

    p.wait_for("an instance RUNNING on agent-0 and agent-1", lambda: set(running()) == {"agent-0", "agent-1"}, 60)
    status = json.loads(p.ctl("job", "status", job, "--json").stdout)
    assert status["state"] == "RUNNING" and status["type"] == "DAEMON"
    listed = {d["host"]: d for d in status["daemon_hosts"]}
    assert {h: d["state"] for h, d in listed.items() if d["instance"] is not None} == {"agent-0": "RUNNING",
                                                                                       "agent-1": "RUNNING"}
    # agent-2 has never reported (no host-state yet), or is listed DOWN with why it runs none
    assert "agent-2" not in listed or listed["agent-2"]["why"].startswith("the host is"), listed

    p.start_agent("agent-2")  # joins: gets an instance of its own
    p.wait_for("an instance on agent-2 too", lambda: set(running()) == {"agent-0", "agent-1", "agent-2"}, 60)
    assert p.store.get_job(job).instance_count == 3

    drained = p.ctl("host", "maintenance", "start", "agent-1")
    assert drained.returncode == 0, drained.stderr
    p.wait_for("agent-1's instance stopped, not moved", lambda: set(running()) == {"agent-0", "agent-2"}, 60)

    def on_agent_1():
        return next(t for t in p.store.tasks_of_job(job) if bound_host(t.spec) == "agent-1")
    p.wait_for("agent-1's instance KILLED", lambda: on_agent_1().state == "KILLED", 30)
    stopped = on_agent_1()
    assert any("its host agent-1 left" in (e["message"] or "") for e in p.store.task_events(job)
               if e["instance"] == stopped.instance)
    said = p.ctl("job", "status", job)
    assert "host agent-1: instance" in said.stdout and "KILLED" in said.stdout, said.stdout
    assert p.ctl("host", "maintenance", "complete", "agent-1").returncode == 0
    p.wait_for("agent-1's instance running again", lambda: "agent-1" in running(), 60)
    again = next(t for t in p.store.tasks_of_job(job) if bound_host(t.spec) == "agent-1")
    assert again.run_id == 2 and again.instance == stopped.instance

    refused = p.ctl("job", "stop", job, "--instances", "0")
    assert refused.returncode == 2 and "DAEMON job runs on every eligible host" in refused.stderr, refused.stderr
    assert p.ctl("job", "stop", job).returncode == 0
    assert p.wait_job(job, timeout=60) == "KILLED"
    p.wait_for("no process of the job left", lambda: processes_of(job) == [], 20)
