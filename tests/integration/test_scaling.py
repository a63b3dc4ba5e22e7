"""Two instances of a stage share its partitions; when one is killed with SIGKILL the other takes
its partitions and finishes the work, with every task run exactly once."""

from __future__ import annotations

import itertools
import signal
import time

import pytest

from pelotonctl.admin import create_pool, emitter, submit_job
from tests.conftest import STORES
from tests.integration.conftest import pool_yaml
from tests.integration.helpers import assigned_partitions, one_key_per_partition, processes_of

pytestmark = pytest.mark.integration

# 4 jobs of 100 one-cpu tasks, each in its own 16-cpu pool, so each job runs in 7 waves; pools
# and job ids are picked to cover every partition, so whichever instance dies holds work.
MANY = """
name: many
instancecount: 100
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 16, disklimitmb: 1}
  command: {shell: true, value: 'true'}
"""


# On PostgreSQL in `make soak` only: test_devstack kills one instance of every stage of a
# PostgreSQL stack in `make test` already, and these runs are the suite's longest. On Cassandra,
# `make test` kills admit, the stage whose batches hold most writes (see CassandraStore.transaction).
FAILOVER_CASES = [pytest.param(stage, store, marks=pytest.mark.slow)
                  if store == "postgres" or (store == "cassandra" and stage != "admit") else (stage, store)
                  for store in STORES for stage in ("admit", "entitle", "place")]


@pytest.mark.parametrize("stage,store", FAILOVER_CASES)
def test_a_killed_instance_hands_its_partitions_over_and_every_task_runs_once(pipeline_factory, stage, store) -> None:
    p = pipeline_factory(hosts="sim:16:cpu=8,mem_mb=65536,disk_mb=100000", sim_task_seconds=0.5, store_kind=store)
    others = [s for s in ("admit", "entitle", "place", "launch") if s != stage]
    for s in others:
        p.start(s, wait=False)
    p.start(stage, f"{stage}-a")
    victim = p.start(stage, f"{stage}-b")
    # Both instances hold partitions once the group has rebalanced.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        a, b = (assigned_partitions(p.log(f"{stage}-{x}").read_text()) for x in "ab")
        if b and b[-1] != "[]" and "revoked" in p.log(f"{stage}-a").read_text():
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the second {stage} instance never got partitions: {b}")

    pools = one_key_per_partition("/pool")
    for pool in pools:
        create_pool(p.settings, p.store, pool, pool_yaml(cpu=16))
    jobs = one_key_per_partition("job-")
    out = emitter(p.settings)
    for job_id, pool in zip(jobs, pools, strict=True):
        submit_job(p.settings, p.store, pool, MANY, job_id=job_id, out=out)
    deadline = time.monotonic() + 60
    while sum(c.get("SUCCEEDED", 0) for c in p.store.task_state_counts(jobs).values()) < 40:
        assert time.monotonic() < deadline, "the jobs made no progress"
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    killed_at = time.monotonic()
    done = sum(c.get("SUCCEEDED", 0) for c in p.store.task_state_counts(jobs).values())
    assert done < 300, f"{done} of 400 tasks were done before the kill; the test would prove nothing"

    for job_id in jobs:
        assert p.wait_job(job_id, timeout=120) == "SUCCEEDED"
        runs = p.store.launch_counts(job_id)
        assert len(runs) == 100 and set(runs.values()) == {1}, f"{job_id}: some instance ran twice or never"
        assert {t.run_id for t in p.store.tasks_of_job(job_id)} == {1}
    survivor = p.log(f"{stage}-a").read_text()
    assert len(assigned_partitions(survivor)) >= 2, "the survivor never took over the partitions"
    print(f"{stage}: all 400 tasks done {time.monotonic() - killed_at:.1f}s after the kill")


SLEEPY = """
name: sleepy
instancecount: 8
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 16, disklimitmb: 1}
  # First runs outlive the takeover (so there are orphans to kill); reruns end at once.
  command: {shell: true, value: 'case $PELOTON_TASK_ID in *-1) sleep 15;; esac'}
"""


def test_a_killed_launch_instance_leaves_no_orphan_running_and_its_tasks_run_again(pipeline_factory) -> None:
    p = pipeline_factory(hosts="local:8:cpu=1,mem_mb=1024,disk_mb=1000")
    for s in ("admit", "entitle", "place"):
        p.start(s, wait=False)
    p.start("launch", "launch-a")
    victim = p.start("launch", "launch-b")
    deadline = time.monotonic() + 30
    while "revoked" not in p.log("launch-a").read_text():
        assert time.monotonic() < deadline, "the second launch instance never got partitions"
        time.sleep(0.1)
    job_id = p.submit(SLEEPY)
    deadline = time.monotonic() + 30
    while p.store.task_state_counts([job_id])[job_id].get("RUNNING", 0) < 8:
        assert time.monotonic() < deadline, "the tasks never all ran"
        time.sleep(0.1)
    victim.send_signal(signal.SIGKILL)
    victim.wait()

    assert p.wait_job(job_id, timeout=90) == "SUCCEEDED"
    tasks = p.store.tasks_of_job(job_id)
    rerun = [t for t in tasks if t.run_id > 1]
    assert rerun, "no task of the killed instance was taken over; the test proved nothing"
    lost = [e for e in p.store.task_events(job_id) if e["state"] == "LOST"]
    assert {e["instance"] for e in lost} == {t.instance for t in rerun}
    assert processes_of(job_id) == []  # the orphans were killed, and the reruns ended
    survivor = p.log("launch-a").read_text()
    assert "orphan process group" in survivor and "killed" in survivor


def test_a_backlog_of_creates_is_taken_a_turn_of_tasks_at_a_time_and_every_job_runs_once(pipeline_factory) -> None:
    # Creates that waited for the job manager (it was down, or behind) are read in one batch: each
    # expands to its tasks in the turn that takes it, so a turn stops at max_turn_tasks (here 150:
    # one of these 100-task jobs) and the rest wait, in order, for the next. Jobs created in one
    # turn share its clock reading (created_ms). The job manager is killed once mid-backlog: what
    # it carried but had not handled is read again by the next one, and nothing runs twice.
    p = pipeline_factory(hosts="sim:8:cpu=32,mem_mb=65536,disk_mb=100000", max_turn_tasks=150)
    p.start_all()
    p.procs["admit-0"].send_signal(signal.SIGKILL)
    p.procs["admit-0"].wait()
    jobs = [p.submit(MANY.replace("name: many", f"name: backlog-{i}")) for i in range(16)]
    p.start("admit", instance="admit-0")
    p.wait_for("two jobs created", lambda: len(p.store.get_jobs(jobs)) >= 2, 60)
    p.procs["admit-0"].send_signal(signal.SIGKILL)
    p.procs["admit-0"].wait()
    made = len(p.store.get_jobs(jobs))
    p.start("admit", instance="admit-0")
    for job_id in jobs:
        assert p.wait_job(job_id, timeout=120) == "SUCCEEDED"
    for job_id in jobs:
        runs = p.store.launch_counts(job_id)
        assert len(runs) == 100 and set(runs.values()) == {1}, f"{job_id}: {runs}"
    turns = [len(list(group)) for _, group in itertools.groupby(
        sorted(p.store.get_jobs(jobs).values(), key=lambda j: j.created_ms), key=lambda j: j.created_ms)]
    assert sum(turns) == 16 and max(turns) == 1, turns
    print(f"{made} of 16 jobs made before the kill")
