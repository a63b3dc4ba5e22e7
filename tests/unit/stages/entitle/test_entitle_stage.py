"""The resource manager (EntitleStage) without a broker: records fed by hand, output read from a
recording emitter (the store is a real SQLite file): lending and preempting, admission, queues
rebuilt by a new owner, ended runs forgotten."""

from __future__ import annotations

import sqlite3
import time

import pytest

from peloton.model.pool import parse_pool_config
from peloton.runtime import RecordingEmitter, StaticView, handle_batch
from peloton.store import Allocation
from peloton.topics import partition_for
from stages.entitle.stage import EntitleStage
from tests.builders.stages import POOL, bound, host_state, one_task_gang, record


def entitle_with(store, partitions=range(4), on_topic=(),
                 **settings) -> tuple[EntitleStage, RecordingEmitter, StaticView]:
    """An entitle instance owning `partitions`; `on_topic`: the admitted-gangs records (or None:
    unreadable) its predecessor's admissions are read back from."""
    usage = StaticView()
    stage = EntitleStage(store, usage=usage, hosts=StaticView({"h1": host_state("h1", cpu=8)}))
    stage.read_back = lambda *_args: None if on_topic is None else list(on_topic)
    out = bound(stage, **settings)
    stage.on_assign([("task-demand", p) for p in partitions])
    return stage, out, usage


def test_entitle_lends_an_idle_pools_share_and_preempts_it_back_after_the_sustained_periods(store) -> None:
    store.put_pool("/q", parse_pool_config(POOL.replace("reservation: 8, limit: 8", "reservation: 4, limit: 8"), "/q"))
    store.put_pool("/p", parse_pool_config(POOL.replace("reservation: 8, limit: 8", "reservation: 4, limit: 8"), "/p"))
    # This instance owns /p (partition 2); another owns /q (partition 3) and publishes its usage.
    assert partition_for("/p", 4) != partition_for("/q", 4)
    stage, out, usage = entitle_with(store, [partition_for("/p", 4)], preemption_sustained_periods=2)
    stage.handle([record("task-demand", "peloton.GangDemand", one_task_gang(f"a-{i}-1"), key="/p") for i in range(8)])
    assert len(out.take("admitted-gangs")) == 8  # /q is idle: /p borrows its 4 cpu
    assert out.take("task-status", "peloton.TaskProgress") == []  # admitted by their own batch: no READY
    # /q wants its share now (its owner, another instance, publishes its demand)
    usage.put("/q", {"pool": "/q", **{k: {"cpu": 0.0, "mem_mb": 0.0, "disk_mb": 0.0, "gpu": 0.0} for k in (
        "entitlement", "allocation", "non_slack_allocation", "slack_allocation", "slack_demand")},
        "demand": {"cpu": 4.0, "mem_mb": 4.0, "disk_mb": 0.0, "gpu": 0.0}})
    stage._admit()  # recomputes the tree: the view changed
    assert stage.ledgers["/p"].entitlement.cpu == 4
    stage._reclaim()
    assert out.take("placements") == []  # one period over: not sustained yet
    stage._reclaim()
    kills = [v for _, _, schema, v in out.take("placements") if schema == "peloton.TaskKill"]
    assert len(kills) == 4 * 4  # 4 victims, each on every host shard's partition
    assert len({k["task_id"] for k in kills}) == 4 and {k["reason"] for k in kills} == {"PREEMPTED"}
    statuses = [v for _, _, _, v in out.take("task-status", "peloton.TaskStatus")]
    assert {(s["state"], s["reason"]) for s in statuses} == {("TASK_KILLING", "PREEMPTED")}
    stage._reclaim()
    assert out.take("placements") == []  # being preempted: not chosen again


def test_entitle_says_ready_only_for_the_gangs_that_waited_for_admission(store) -> None:
    stage, out, _ = entitle_with(store)  # /p: 8 cpu
    stage.handle([record("task-demand", "peloton.GangDemand", one_task_gang(f"r-{i}-1", cpu=2.0), key="/p")
                  for i in range(6)])
    assert len(out.take("admitted-gangs")) == 4  # the pool is full: two wait, queued in the store
    assert out.take("task-status", "peloton.TaskProgress") == []  # admitted at once: they go on from PENDING
    assert len(store.queued_gangs(["/p"])) == 2
    stage.handle([record("task-demand", "peloton.TaskRelease", {
        "task_id": f"r-{i}-1", "job_id": "r", "pool": "/p", "reason": "TASK_FINISHED", "timestamp_ms": 2},
        key="/p") for i in range(2)])
    assert len(out.take("admitted-gangs")) == 2
    [(_, _, _, ready)] = out.take("task-status", "peloton.TaskProgress")  # one record for the job's 2 runs
    assert (ready["state"], sorted(r["instance"] for r in ready["runs"])) == ("READY", [4, 5])


def test_entitle_admits_a_whole_batch_of_a_pool_at_once_without_queueing_it_in_the_store(store) -> None:
    stage, out, _ = entitle_with(store)
    gangs = [record("task-demand", "peloton.GangDemand", one_task_gang(f"w-{i}-1", cpu=0.005), key="/p")
             for i in range(1500)]  # more than the 1,000 a pool once admitted per turn
    stage.handle(gangs)
    assert len(out.take("admitted-gangs")) == 1500
    assert store.queued_gangs(["/p"]) == [] and len(stage.queues["/p"]) == 0


def test_a_new_entitle_owner_rebuilds_queues_and_charges_from_the_store(store) -> None:
    first, out, _ = entitle_with(store)
    gangs = [record("task-demand", "peloton.GangDemand", one_task_gang(f"b-{i}-1", cpu=3), key="/p") for i in range(4)]
    first.handle(gangs)
    assert len(out.take("admitted-gangs")) == 2  # 6 of the pool's 8 cpu; two wait
    first.tick(time.monotonic())
    first.tick(time.monotonic())  # its admissions were flushed after the first tick: forgotten
    second, out2, _ = entitle_with(store)  # the partition moved: no topic is read again
    assert len(second.queues["/p"]) == 2 and second.ledgers["/p"].held.total.cpu == 6
    second.handle([record("task-demand", "peloton.TaskRelease", {
        "task_id": "b-0-1", "job_id": "b", "pool": "/p", "reason": "TASK_FINISHED", "timestamp_ms": 1}, key="/p")])
    assert [v["gang"]["gang_id"] for _, _, _, v in out2.take("admitted-gangs")] == ["b-2-1"]
    # the first instance, not told yet that it lost the pool, cannot admit what the second took
    first.ledgers["/p"].release("b-1-1")
    first._admit()  # it tries b-2-1, finds it taken and drops it from its queue
    first._admit()
    assert [v["gang"]["gang_id"] for _, _, _, v in out.take("admitted-gangs")] == ["b-3-1"]
    assert sorted(a.task_id for a in store.allocations()) == ["b-1-1", "b-2-1", "b-3-1"]
    assert store.queued_gangs() == []


def waited_then_admitted(stage: EntitleStage, out: RecordingEmitter, count: int, prefix: str) -> list[dict]:
    """Gangs that waited in the store's queue and were admitted by a later batch (two 3-cpu gangs
    fill the pool's 8 cpu first, and end), as the admissions of that batch sent them."""
    stage.handle([record("task-demand", "peloton.GangDemand", one_task_gang(f"{prefix}-{i}-1", cpu=3), key="/p")
                  for i in range(2 + count)])
    assert len(out.take("admitted-gangs")) == 2
    assert sorted(q.gang_id for q in stage.store.queued_gangs()) == [f"{prefix}-{i}-1" for i in range(2, 2 + count)]
    stage.handle([record("task-demand", "peloton.TaskRelease", {
        "task_id": f"{prefix}-{i}-1", "job_id": prefix, "pool": "/p", "reason": "TASK_FINISHED", "timestamp_ms": 1},
        key="/p") for i in range(2)])
    return [v for _, _, _, v in out.take("admitted-gangs")]


def test_a_gang_admitted_by_the_batch_that_brought_it_is_never_queued_in_the_store(store) -> None:
    first, out, _ = entitle_with(store)
    demands = [record("task-demand", "peloton.GangDemand", one_task_gang(f"u-{i}-1", cpu=3), key="/p")
               for i in range(2)]
    first.handle(demands)
    assert len(out.take("admitted-gangs")) == 2
    assert store.queued_gangs() == [] and store.unsent_admissions() == []  # no row written, marked, deleted
    assert sorted(a.task_id for a in store.allocations()) == ["u-0-1", "u-1-1"]
    # ... and the process dies before its transaction commits: the next owner reads the demand
    # again, finds the runs held, and sends their admissions again, charged once.
    second, out2, _ = entitle_with(store)
    assert out2.take("admitted-gangs") == []
    second.handle(demands)
    assert sorted(v["gang"]["gang_id"] for _, _, _, v in out2.take("admitted-gangs")) == ["u-0-1", "u-1-1"]
    assert second.ledgers["/p"].held.total.cpu == 6


def test_a_batch_that_fails_leaves_none_of_its_gangs_queued(store) -> None:
    stage, out, _ = entitle_with(store)
    demands = [record("task-demand", "peloton.GangDemand", one_task_gang(f"f-{i}-1", cpu=3), key="/p")
               for i in range(3)]
    real = store.queue_gangs

    def away(rows):
        raise sqlite3.OperationalError("database is locked")
    store.queue_gangs = away  # the third gang waits, and the store is away when it is to be queued
    with pytest.raises(sqlite3.OperationalError):
        handle_batch(stage, demands, out)  # (its output discarded, as the runtime does)
    assert out.take("admitted-gangs") == []
    # The two admitted are stored and charged; the third is not queued, here or in the store.
    assert len(stage.queues["/p"]) == 0 and stage.ledgers["/p"].held.total.cpu == 6
    store.queue_gangs = real
    handle_batch(stage, demands, out)  # the batch again: two found held (sent again), the third queued
    assert sorted(v["gang"]["gang_id"] for _, _, _, v in out.take("admitted-gangs")) == ["f-0-1", "f-1-1"]
    assert [q.gang_id for q in store.queued_gangs()] == ["f-2-1"] and len(stage.queues["/p"]) == 1


def test_admissions_stored_but_maybe_never_sent_are_sent_again_by_the_next_owner(store) -> None:
    first, out, _ = entitle_with(store)
    sent = waited_then_admitted(first, out, 1, "u")
    assert [v["gang"]["gang_id"] for v in sent] == ["u-2-1"]  # ... and the process dies before the broker has it
    second, out2, _ = entitle_with(store)
    assert [v["gang"]["gang_id"] for _, _, _, v in out2.take("admitted-gangs")] == ["u-2-1"]
    assert second.ledgers["/p"].held.total.cpu == 3  # charged once, not again
    second.tick(time.monotonic())
    second.tick(time.monotonic())
    assert store.unsent_admissions() == [] and store.queued_gangs() == []


@pytest.mark.parametrize("readable", [True, False])
def test_a_new_owner_sends_again_only_the_admissions_the_topic_does_not_hold(store, readable) -> None:
    first, out, _ = entitle_with(store)
    admitted = waited_then_admitted(first, out, 2, "u")
    sent = [("peloton.AdmittedGang", v) for v in admitted if v["gang"]["gang_id"] == "u-2-1"]
    # the transaction holding u-2-1 committed; the process died before the store heard it went
    second, out2, _ = entitle_with(store, on_topic=sent if readable else None)
    again = sorted(v["gang"]["gang_id"] for _, _, _, v in out2.take("admitted-gangs"))
    assert again == (["u-3-1"] if readable else ["u-2-1", "u-3-1"])
    assert [q.gang_id for q in store.unsent_admissions()] == (["u-3-1"] if readable else ["u-2-1", "u-3-1"])


def test_a_run_stopped_before_admission_leaves_its_gang_and_no_charge(store) -> None:
    stage, out, _ = entitle_with(store)
    big = one_task_gang("big-0-1", cpu=8)
    gang = one_task_gang("g-0-1", cpu=3)
    gang["tasks"].append({**gang["tasks"][0], "task_id": "g-1-1", "instance": 1})
    stage.handle([record("task-demand", "peloton.GangDemand", big, key="/p"),
                  record("task-demand", "peloton.GangDemand", gang, key="/p")])
    assert len(out.take("admitted-gangs")) == 1  # the 8-cpu one; the 2-task gang waits
    stage.handle([record("task-demand", "peloton.TaskRelease", {
        "task_id": "g-0-1", "job_id": "g", "pool": "/p", "reason": "TASK_KILLED", "timestamp_ms": 1}, key="/p")])
    [row] = store.queued_gangs()
    assert [t["task_id"] for t in row.gang["tasks"]] == ["g-1-1"]  # the rest of the gang waits on
    stage.handle([record("task-demand", "peloton.TaskRelease", {
        "task_id": "big-0-1", "job_id": "big", "pool": "/p", "reason": "TASK_FINISHED", "timestamp_ms": 1},
        key="/p")])
    [(_, _, _, admitted)] = out.take("admitted-gangs")
    assert [t["task_id"] for t in admitted["gang"]["tasks"]] == ["g-1-1"]
    assert [a.task_id for a in store.allocations()] == ["g-1-1"]


def test_entitle_forgets_ended_runs_after_a_day_a_batch_a_tick_and_then_hourly(store) -> None:
    """Ended runs are kept released_keep_s to recognise a late redelivery, then forgotten: every
    hour, also when the instance's assignment never changes, and a batch a tick through a backlog."""
    from peloton.runtime.record import now_ms

    stage, _, _ = entitle_with(store)
    stage.released_sweep.batch = 2
    day = 86_400_000
    old = [f"old{i}-0-1" for i in range(3)]
    store.add_allocations([Allocation(t, "/p", t, 1, 1, 0, 0, 1) for t in [*old, "new-0-1", "live-0-1"]])
    store.release_allocations(old, now_ms() - 2 * day)
    store.release_allocations(["new-0-1"], now_ms())
    start = time.monotonic()
    stage.tick(start)  # the first tick sweeps: a batch of two
    assert len(store.allocation_states(old)) == 1
    stage.tick(start + 1)  # a whole batch went: the next tick goes on
    assert store.allocation_states([*old, "new-0-1", "live-0-1"]) == {"new-0-1": "released", "live-0-1": "held"}
    store.add_allocations([Allocation("later-0-1", "/p", "later-0-1", 1, 1, 0, 0, 1)])
    store.release_allocations(["later-0-1"], now_ms() - 2 * day)
    stage.tick(start + 2)
    stage.tick(start + 60)  # within the hour: kept
    assert store.allocation_states(["later-0-1"]) == {"later-0-1": "released"}
    stage.tick(start + 1 + stage.released_sweep.every)
    assert store.allocation_states(["later-0-1"]) == {}
