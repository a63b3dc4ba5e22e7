"""Peloton's placement rules through the whole pipeline on a real broker (simulated hosts):
TASK constraints count every task on a host, SPREAD_JOB spreads where PACK packs."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration

HOST_LIMITED = """
name: one-per-host
instancecount: 4
labels: [{key: app, value: web}]
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 16, disklimitmb: 1}
  command: {shell: true, value: 'true'}
  # Peloton's host-limit example: no host may already run a task labelled app=web
  constraint:
    type: 1
    labelconstraint: {kind: 1, condition: 2, label: {key: app, value: web}, requirement: 0}
"""

SIX = """
name: six-{strategy}
instancecount: 6
placementstrategy: {strategy}
defaultconfig:
  resource: {{cpulimit: 1, memlimitmb: 16, disklimitmb: 1}}
  command: {{shell: true, value: 'true'}}
"""


def test_at_most_one_per_host_runs_three_on_three_hosts_and_leaves_the_fourth_waiting(pipeline_factory) -> None:
    p = pipeline_factory(hosts="sim:3:cpu=8,mem_mb=4096,disk_mb=1000", sim_task_seconds=300.0,
                         placement_backoff_s=0.5)
    p.start_all()
    job = p.submit(HOST_LIMITED)
    p.wait_for("3 tasks RUNNING", lambda: p.counts(job).get("RUNNING", 0) == 3, 30)
    time.sleep(3)  # the fourth keeps trying: it must not find a host
    tasks = p.store.tasks_of_job(job)
    running = [t for t in tasks if t.state == "RUNNING"]
    assert len(running) == 3 and len({t.host_id for t in running}) == 3
    [waiting] = [t for t in tasks if t.state != "RUNNING"]
    assert waiting.state in ("PENDING", "READY", "PLACING"), waiting.state


@pytest.mark.parametrize("strategy, hosts_used", [("SPREAD_JOB", 6), ("PACK_HOST", 1)])
def test_spread_puts_six_tasks_on_six_hosts_where_pack_puts_them_on_one(pipeline_factory, strategy, hosts_used) -> None:
    p = pipeline_factory(hosts="sim:6:cpu=8,mem_mb=4096,disk_mb=1000", sim_task_seconds=300.0)
    p.start_all()
    job = p.submit(SIX.format(strategy=strategy))
    p.wait_for("6 tasks RUNNING", lambda: p.counts(job).get("RUNNING", 0) == 6, 30)
    assert len({t.host_id for t in p.store.tasks_of_job(job)}) == hosts_used


PORTED = """
name: ported
instancecount: 2
defaultconfig:
  resource: {cpulimit: 0.1, memlimitmb: 16, disklimitmb: 1}
  ports:
  - {name: http, value: 0, envname: HTTP_PORT}
  - {name: admin, value: 0, envname: ADMIN_PORT}
  command: {shell: true, value: 'echo "$HTTP_PORT $ADMIN_PORT"'}
"""


def test_dynamic_ports_are_picked_from_the_host_range_and_given_to_the_task_in_its_variables(
        pipeline_factory) -> None:
    p = pipeline_factory(hosts="local:1:cpu=2,mem_mb=1024,disk_mb=1000")
    p.start_all()
    job = p.submit(PORTED)
    assert p.wait_job(job) == "SUCCEEDED"
    seen = []
    for t in p.store.tasks_of_job(job):
        http, admin = map(int, (p.home / "sandboxes" / t.task_id / "stdout").read_text().split())
        seen += [http, admin]
        assert 31000 <= http <= 32000 and 31000 <= admin <= 32000
    assert len(set(seen)) == 4, f"two tasks on one host got the same port: {seen}"


def test_an_agent_gives_tasks_ports_from_its_own_range_and_its_labels_reach_constraints(pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:2:cpu=2,mem_mb=1024,disk_mb=1000")
    for stage in ("admit", "entitle", "place", "launch"):
        p.start(stage, wait=False)
    p.start_agent("agent-0")
    p.start_agent("agent-1", "--ports", "40000-40003", "--attribute", "rack=b")
    pinned = PORTED.replace("  command:", "  constraint:\n    type: 1\n    labelconstraint: {kind: 2, condition: 2, "
                            "label: {key: rack, value: b}, requirement: 1}\n  command:")
    job = p.submit(pinned)
    assert p.wait_job(job) == "SUCCEEDED"
    for t in p.store.tasks_of_job(job):
        assert t.host_id == "agent-1"
        http, admin = map(int, (p.home / "sandboxes" / t.task_id / "stdout").read_text().split())
        assert http != admin and {http, admin} <= {40000, 40001, 40002, 40003}
