"""Host pools on real agent hosts, through Peloton's CLI forms: a pool made, a host moved in
(idle: at once; busy: after its runs drain, under its jobs' disruption budgets), jobs steered by a
HOST constraint on `host_pool`, and the pool deleted with its hosts back in the default pool."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration

IN_POOL = """name: {name}
instanceCount: {count}
sla: {{maximumUnavailableInstances: 1}}
defaultConfig:
  resource: {{cpuLimit: 0.1, memLimitMb: 16, diskLimitMb: 10}}
  command: {{value: 'sleep 600'}}
  constraint:
    type: LABEL_CONSTRAINT
    labelConstraint:
      kind: HOST
      condition: CONDITION_EQUAL
      requirement: 1
      label: {{key: host_pool, value: {pool}}}
"""


def test_host_pools_steer_placement_and_a_busy_host_drains_before_it_moves(pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:3:cpu=2,mem_mb=1024,disk_mb=1000")
    for stage in ("admit", "entitle", "place", "launch"):
        p.start(stage, wait=False)
    for host in ("agent-0", "agent-1", "agent-2"):
        p.start_agent(host)

    def pools() -> dict[str, list[str]]:
        listed = p.ctl("hostmgr", "hostpool", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        return {pool["name"]: pool["hosts"] for pool in json.loads(listed.stdout)["pools"]}

    p.wait_for("every host in the default pool", lambda: pools() == {
        "default": ["agent-0", "agent-1", "agent-2"]}, 30)
    made = p.ctl("hostmgr", "hostpool", "create", "gpu")
    assert made.returncode == 0 and made.stdout == "Created host pool 'gpu'.\n", made.stderr
    assert p.ctl("hostmgr", "hostpool", "create", "gpu").returncode == 2  # taken
    moved = p.ctl("hostmgr", "hostpool", "change", "agent-2", "gpu", "-s", "default")
    assert moved.returncode == 0 and "changed to 'gpu'" in moved.stdout, moved.stderr
    p.wait_for("agent-2 in gpu", lambda: pools().get("gpu") == ["agent-2"], 30)
    assert p.ctl("hostmgr", "hostpool", "list-hosts", "gpu").stdout == "agent-2\n"

    (p.home / "gpu.yaml").write_text(IN_POOL.format(name="trainer", count=3, pool="gpu"))
    trainer = p.ctl("job", "create", "/test", str(p.home / "gpu.yaml")).stdout.split()[1]

    def hosts_of(job: str, state: str = "RUNNING") -> list[str]:
        return sorted(t.host_id for t in p.store.tasks_of_job(job) if t.state == state)
    p.wait_for("the trainer's 3 tasks RUNNING", lambda: len(hosts_of(trainer)) == 3, 60)
    assert hosts_of(trainer) == ["agent-2"] * 3

    # A busy host moving: it drains (the job's budget lets its one task go), then joins gpu UP.
    (p.home / "default.yaml").write_text(IN_POOL.format(name="web", count=1, pool="default"))
    web = p.ctl("job", "create", "/test", str(p.home / "default.yaml")).stdout.split()[1]
    p.wait_for("web RUNNING", lambda: len(hosts_of(web)) == 1, 60)
    busy = hosts_of(web)[0]
    assert busy in ("agent-0", "agent-1")
    moving = p.ctl("hostmgr", "hostpool", "change", busy, "gpu")
    assert moving.returncode == 0, moving.stderr
    p.wait_for(f"{busy} in gpu", lambda: sorted(pools().get("gpu", [])) == sorted(["agent-2", busy]), 90)
    hosts = {h["host_id"]: h for h in json.loads(p.ctl("host", "list", "--json").stdout)["hosts"]}
    assert hosts[busy]["state"] == "UP" and hosts[busy]["labels"]["host_pool"] == "gpu"
    p.wait_for("web running again on the default pool's other host", lambda: hosts_of(web) != []
               and hosts_of(web)[0] not in (busy, "agent-2"), 60)
    assert hosts_of(trainer) == ["agent-2"] * 3  # the move of another host left them alone

    deleted = p.ctl("hostmgr", "hostpool", "delete", "gpu")
    assert deleted.returncode == 0 and "Deleted host pool 'gpu'." in deleted.stdout, deleted.stderr
    p.wait_for("every host back in default", lambda: pools() == {"default": ["agent-0", "agent-1", "agent-2"]}, 30)
    refused = p.ctl("hostmgr", "hostpool", "delete", "default")
    assert refused.returncode == 2 and "cannot be deleted" in refused.stderr
