"""The resource manager on a real broker: elastic sharing, preemption between pools, the
reservation rule for non-preemptible jobs, and failover of entitle instances."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from pelotonctl.admin import create_pool, emitter, submit_job
from tests.integration.helpers import assigned_partitions, one_key_per_partition

pytestmark = pytest.mark.integration


def pool(reserved_cpu: float, limit_cpu: float) -> str:
    return f"""
resources:
- {{kind: cpu, reservation: {reserved_cpu}, limit: {limit_cpu}, share: 1}}
- {{kind: memory, reservation: 4096, limit: 65536, share: 1}}
- {{kind: disk, reservation: 1000, limit: 100000, share: 1}}
"""


def job(name: str, count: int, preemptible: bool, priority: int = 0) -> str:
    return f"""
name: {name}
instancecount: {count}
sla: {{preemptible: {str(preemptible).lower()}, priority: {priority}}}
defaultconfig:
  resource: {{cpulimit: 1, memlimitmb: 16, disklimitmb: 1}}
  command: {{shell: true, value: 'true'}}
"""


# Fast periods, so that preemption shows within seconds: over entitlement for 2 periods of 1 s.
FAST = dict(preemption_period_s=1.0, preemption_sustained_periods=2, requeue_backoff_s=0.5,
            placement_attempts=4, placement_backoff_s=0.25, entitlement_period_s=0.5)


def test_an_idle_pools_share_is_lent_and_taken_back_by_preemption(pipeline_factory) -> None:
    # 12 cpu of hosts; two pools under the root, 6 cpu reserved each. Tasks run for minutes.
    p = pipeline_factory(hosts="sim:3:cpu=4,mem_mb=65536,disk_mb=100000", sim_task_seconds=600, **FAST)
    create_pool(p.settings, p.store, "/first", pool(6, 12))
    create_pool(p.settings, p.store, "/second", pool(6, 12))
    p.start_all()
    first = p.submit(job("first", 12, preemptible=True), pool="/first")
    p.wait_for("all 12 tasks of the first pool running while the second is idle",
               lambda: p.counts(first).get("RUNNING", 0) == 12, 60)

    second = p.submit(job("second", 12, preemptible=True), pool="/second")
    p.wait_for("6 tasks of the second pool running",
               lambda: p.counts(second).get("RUNNING", 0) == 6 and p.counts(first).get("RUNNING", 0) == 6, 90)
    time.sleep(3)  # and it stays so: neither pool takes more than its entitlement back
    assert p.counts(first).get("RUNNING", 0) == 6 and p.counts(second).get("RUNNING", 0) == 6

    # Six runs of the first job were preempted: killed with the reason, and run again (pending).
    preempted = [t for t in p.store.tasks_of_job(first) if t.run_id == 2]
    assert len(preempted) == 6 and all(t.state == "PENDING" for t in preempted)
    # `task list` shows why: the reason and message of the run that was preempted
    assert all(t.reason == "PREEMPTED" and "held more than its entitlement" in t.message for t in preempted)
    events = p.store.task_events(first)
    assert sum(1 for e in events if e["state"] == "PREEMPTING") == 6
    assert sum(1 for e in events if e["state"] == "KILLED" and e["reason"] == "PREEMPTED") == 6
    assert all(t.failures == 0 for t in p.store.tasks_of_job(first)), "a preemption is not the task's failure"


def test_a_non_preemptible_job_stays_within_the_reservation_while_a_preemptible_one_borrows(pipeline_factory) -> None:
    p = pipeline_factory(hosts="sim:3:cpu=4,mem_mb=65536,disk_mb=100000", sim_task_seconds=600, **FAST)
    create_pool(p.settings, p.store, "/batch", pool(4, 12))
    create_pool(p.settings, p.store, "/idle", pool(4, 12))
    p.start_all()
    steady = p.submit(job("steady", 6, preemptible=False), pool="/batch")
    p.wait_for("4 non-preemptible tasks running", lambda: p.counts(steady).get("RUNNING", 0) == 4, 60)
    borrower = p.submit(job("borrower", 4, preemptible=True), pool="/batch")
    p.wait_for("the preemptible job running on borrowed capacity",
               lambda: p.counts(borrower).get("RUNNING", 0) == 4, 60)
    time.sleep(2)
    assert p.counts(steady) == {"RUNNING": 4, "PENDING": 2}, "non-preemptible tasks beyond the reservation ran"
    # Why the two wait is published with the pool's entitlement.
    waiting = [w for e in p.read_topic("entitlements", expect=1) if e["pool"] == "/batch" for w in e["waiting"]]
    assert any("reservation" in w["reason"] and w["job_id"] == steady for w in waiting), waiting


def test_a_killed_entitle_instance_leaves_no_allocation_charged_twice_or_forgotten(pipeline_factory) -> None:
    # Four pools, one per partition, each limited to 4 cpu; 2 entitle instances split them.
    p = pipeline_factory(hosts="sim:8:cpu=8,mem_mb=65536,disk_mb=100000", sim_task_seconds=0.3, **FAST)
    pools = one_key_per_partition("/rm")
    for path in pools:
        create_pool(p.settings, p.store, path, pool(4, 4))
    for stage in ("admit", "place", "launch"):
        p.start(stage, wait=False)
    p.start("entitle", "entitle-a")
    victim = p.start("entitle", "entitle-b")
    deadline = time.monotonic() + 30
    while not (assigned_partitions(p.log("entitle-b").read_text()) or [""])[-1].strip("[]"):
        assert time.monotonic() < deadline, "the second entitle instance never got partitions"
        time.sleep(0.1)
    out = emitter(p.settings)
    jobs = [submit_job(p.settings, p.store, path, job(f"j{i}", 40, preemptible=True), out=out)
            for i, path in enumerate(pools)]
    p.wait_for("some progress", lambda: sum(p.counts(j).get("SUCCEEDED", 0) for j in jobs) >= 20, 60)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    for j in jobs:
        assert p.wait_job(j, timeout=120) == "SUCCEEDED"
        runs = p.store.launch_counts(j)
        assert len(runs) == 40 and set(runs.values()) == {1}, f"{j}: some instance ran twice or never"
    # Never more than the pool's 4 cpu at once (a forgotten charge would let more in) ...
    for path, j in zip(pools, jobs, strict=True):
        spans = launch_span(p, j)
        assert max_overlap(spans) <= 4, f"{path} ran {max_overlap(spans)} tasks at once on a 4-cpu pool"
    # ... and nothing left held once every run's release is in (a charge counted twice would stay).
    p.wait_for("every allocation released and no gang queued",
               lambda: p.store.allocations() == [] and p.store.queued_gangs() == [], 15)


def launch_span(p, job_id: str) -> list[tuple[int, int]]:
    rows = p.store.connection("launches").execute(
        "SELECT launched_ms, ended_ms FROM launches WHERE job_id = ?", (job_id,)).fetchall()
    return [(a, b) for a, b in rows]


def max_overlap(spans: list[tuple[int, int]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    best = now = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


PELOTON_FILES = Path(__file__).parent / "peloton_files"  # Peloton's own example files, unchanged


def test_pelotons_own_pools_lend_to_each_other_and_take_back_by_preemption(pipeline_factory) -> None:
    """Peloton's example pool and job files, as they are: HelloWorldPool (4 cpu reserved, limit 8)
    borrows what the idle DefaultResPool (12 reserved) leaves, then gives it back by preemption
    when DefaultResPool's own job (10 one-cpu tasks, not preemptible) wants its reservation."""
    read = lambda name: (PELOTON_FILES / name).read_text()  # noqa: E731
    # 16 cpu of hosts: the two reservations, nothing more to lend once both want theirs.
    p = pipeline_factory(hosts="sim:4:cpu=4,mem_mb=65536,disk_mb=100000", sim_task_seconds=600, **FAST)
    create_pool(p.settings, p.store, "/DefaultResPool", read("default_respool.yaml"))
    create_pool(p.settings, p.store, "/HelloWorldPool", read("helloworld_pool.yaml"))
    p.start_all()

    def held(jobs: list[str]) -> float:  # cpu of the runs RUNNING, 0.1 per service instance
        return round(sum(p.counts(j).get("RUNNING", 0) for j in jobs) * 0.1, 1)

    # Ten copies of Peloton's preemptible stateless service: 100 instances of 0.1 cpu, 10 cpu asked
    # of a pool with 4 reserved and a limit of 8.
    services = [p.submit(read("testjob_stateless_preemptible.yaml"), pool="/HelloWorldPool") for _ in range(10)]
    p.wait_for("HelloWorldPool at its limit, 4 cpu lent by the idle DefaultResPool", lambda: held(services) == 8.0, 90)

    batch = p.submit(read("testjob.yaml"), pool="/DefaultResPool")
    p.wait_for("DefaultResPool's 10 tasks running", lambda: p.counts(batch).get("RUNNING", 0) == 10, 120)
    # DefaultResPool is entitled to its demand (10 of its 12 reserved); HelloWorldPool to its
    # reservation and the 2 cpu left: the 2 cpu above that were taken back.
    p.wait_for("HelloWorldPool down to 6 cpu", lambda: held(services) == 6.0, 60)
    time.sleep(3)
    assert held(services) == 6.0 and p.counts(batch).get("RUNNING", 0) == 10
    preempted = [t for j in services for t in p.store.tasks_of_job(j) if t.run_id > 1]
    assert len(preempted) >= 20 and all(t.failures == 0 for t in preempted), "a preemption is not a failure"
    kills = [e for j in services for e in p.store.task_events(j) if e["state"] == "KILLED"]
    assert kills and {e["reason"] for e in kills} == {"PREEMPTED"}
