"""Stateful jobs on real agent hosts: an instance's persistent volume is made on the host of its
first run, keeps its files across a kill, a restart and an in-place update, and the instance
waits for that host while it is drained, never running elsewhere; deleting the job deletes the
volume from its host."""

from __future__ import annotations

import json
import os
import signal

import pytest

pytestmark = pytest.mark.integration

STATEFUL = """name: store
type: SERVICE
instanceCount: 1
sla: {{maximumUnavailableInstances: 1}}
defaultConfig:
  resource: {{cpuLimit: 0.1, memLimitMb: 16, diskLimitMb: 10}}
  volume: {{containerPath: state/db, sizeMB: 20}}
  command:
    value: 'echo "{word} $PELOTON_TASK_ID" >> state/db/log; exec sleep 600'
"""


def test_a_stateful_instance_keeps_its_volume_and_its_host(pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:2:cpu=2,mem_mb=1024,disk_mb=1000", service_backoff_base_s=0.2)
    for stage in ("admit", "entitle", "place", "launch"):
        p.start(stage, wait=False)
    p.start_agent("agent-0")
    p.start_agent("agent-1")
    (p.home / "store.yaml").write_text(STATEFUL.format(word="v1"))
    made = p.ctl("job", "create", "/test", str(p.home / "store.yaml"))
    assert made.returncode == 0, made.stderr
    job = made.stdout.split()[1]

    def task():
        [t] = p.store.tasks_of_job(job)
        return t

    def running(run_id: int) -> bool:
        t = task()
        return t.state == "RUNNING" and t.run_id == run_id

    p.wait_for("run 1 RUNNING", lambda: running(1), 60)
    home = task().host_id
    [volume] = p.store.list_volumes(job)
    assert (volume["volume_id"], volume["host_id"], volume["size_mb"], volume["state"]) == (
        f"{job}-0", home, 20, "CREATED")
    assert task().spec["resources"]["disk_mb"] == 30  # the task's 10 and its volume's 20
    [folder] = [f for f in p.home.rglob(f".volumes/{job}-0") if f.is_dir()]
    # Peloton's `volume list JOB`, and `volume get`; a volume of a job still running is not deleted.
    listed = json.loads(p.ctl("volume", "list", job, "--json").stdout)["volumes"]
    assert [(v["volume_id"], v["host_id"], v["state"]) for v in listed] == [(f"{job}-0", home, "CREATED")]
    assert json.loads(p.ctl("volume", "get", f"{job}-0", "--json").stdout)["container_path"] == "state/db"
    early = p.ctl("volume", "delete", f"{job}-0")
    assert early.returncode == 2 and "may run, or run again, on it" in early.stderr, early.stderr

    def lines() -> list[str]:
        log = folder / "log"
        return log.read_text().split("\n")[:-1] if log.exists() else []
    p.wait_for("run 1's line", lambda: [line.split()[0] for line in lines()] == ["v1"], 10)

    # 1. Its run dies: the next one is on the same host and finds the file.
    pid = next(int(x) for x in os.listdir("/proc") if x.isdigit() and _runs(int(x), f"{job}-0-1"))
    os.kill(pid, signal.SIGKILL)
    p.wait_for("run 2 RUNNING", lambda: running(2), 60)
    assert task().host_id == home
    p.wait_for("run 2's line after run 1's", lambda: len(lines()) == 2, 10)

    # 2. A restart.
    assert p.ctl("job", "restart", job).returncode == 0
    p.wait_for("run 3 RUNNING", lambda: running(3), 60)
    assert task().host_id == home
    p.wait_for("run 3's line", lambda: len(lines()) == 3, 10)

    # 3. An update, in place: the new config's runs keep the volume.
    (p.home / "store2.yaml").write_text(STATEFUL.format(word="v2"))
    updated = p.ctl("job", "update", job, str(p.home / "store2.yaml"), "--in-place")
    assert updated.returncode == 0, updated.stderr
    p.wait_for("run 4 RUNNING", lambda: running(4), 60)
    assert task().host_id == home
    p.wait_for("run 4's line, of the new config",
               lambda: [w.split()[0] for w in lines()] == ["v1", "v1", "v1", "v2"], 10)

    # 4. Its host drained: the instance stops and waits for it, never runs on the other host.
    assert p.ctl("host", "maintenance", "start", home).returncode == 0
    p.wait_for("the instance stopped", lambda: task().state not in ("RUNNING", "LAUNCHED", "STARTING"), 60)
    other = "agent-1" if home == "agent-0" else "agent-0"
    p.wait_for("a few placement rounds", lambda: task().run_id == 5, 30)
    assert task().host_id != other and task().state != "RUNNING"
    status = json.loads(p.ctl("job", "status", job, "--json").stdout)
    assert status["state"] != "SUCCEEDED"
    assert p.ctl("host", "maintenance", "complete", home).returncode == 0
    p.wait_for("run 5 RUNNING on its host again", lambda: running(5), 90)
    assert task().host_id == home
    p.wait_for("run 5's line", lambda: len(lines()) == 5, 10)

    # 5. The job stopped and deleted: its volume goes, from the store and from its host.
    assert p.ctl("job", "stop", job).returncode == 0
    assert p.wait_job(job, timeout=60) == "KILLED"
    deleted = p.ctl("job", "delete", job, "--json")
    assert deleted.returncode == 0, deleted.stderr
    p.wait_for("the volume gone from its host", lambda: not folder.exists(), 30)
    assert [v["state"] for v in p.store.list_volumes(job)] == ["DELETED"]


def _runs(pid: int, task_id: str) -> bool:
    """The process is the task's command (sleep), not its executor."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    return argv[0] == b"sleep" and f"PELOTON_TASK_ID={task_id}".encode() in env
