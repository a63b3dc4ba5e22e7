"""The host manager (LaunchStage) without a broker: records fed by hand, output read from a
recording emitter (the store is a real SQLite file): statuses sent per tick, kills, forgetting
ended runs, and agents that read their launches late."""

from __future__ import annotations

import time
import uuid

from peloton.model.events import statuses_of_runs
from peloton.runtime import Record
from peloton.topics import partition_for
from stages.launch.stage import LaunchStage
from tests.builders.stages import agent_report, bound, one_task_gang, placement_of, record


def test_launch_sends_a_ticks_statuses_as_one_record_per_job_and_status(store) -> None:
    stage = LaunchStage(store)
    out = bound(stage, hosts="sim:1:cpu=8", sim_task_seconds=0)
    stage.on_assign([("placements", p) for p in range(4)])
    out.take()
    stage.handle([placement_of(one_task_gang(f"s-{i}-1")) for i in range(3)])
    stage.tick(time.monotonic())
    stage.tick(time.monotonic())
    sent = [(schema, v["state"], v["with_starting"], sorted(r["instance"] for r in v["runs"]))
            for _, _, schema, v in out.take("task-status") if schema != "peloton.TaskProgress"]
    # a start's STARTING and RUNNING, reported at one instant, in one record (statuses_of_runs reads both)
    assert sent == [("peloton.TaskStatusRuns", "TASK_RUNNING", True, [0, 1, 2]),
                    ("peloton.TaskStatusRuns", "TASK_FINISHED", False, [0, 1, 2])]


def statuses_sent(sent: list[tuple]) -> list[dict]:
    """The TaskStatus records among what was sent on task-status, each run of a TaskStatusRuns as its own."""
    out = []
    for _, _, schema, v in sent:
        if schema == "peloton.TaskStatus":
            out.append(v)
        elif schema == "peloton.TaskStatusRuns":
            out.extend(statuses_of_runs(v))
    return out


def kill_of(task_id: str) -> Record:
    job_id, instance, run = task_id.rsplit("-", 2)
    return record("placements", "peloton.TaskKill", {
        "kill_id": uuid.uuid4().hex, "task_id": task_id, "job_id": job_id, "instance": int(instance),
        "run_id": int(run), "reason": "PREEMPTED", "message": "preempted: test", "timestamp_ms": 1})


def test_launch_kills_a_running_run_and_keeps_an_unlaunched_one_from_ever_starting(store) -> None:
    stage = LaunchStage(store)
    out = bound(stage, hosts="sim:1:cpu=8", sim_task_seconds=600)
    stage.on_assign([("placements", p) for p in range(4)])
    out.take()
    running, early = one_task_gang("r-0-1"), one_task_gang("e-0-1")
    # one batch, in order: a placement, a kill of it, a kill of a run not placed yet, its placement
    stage.handle([placement_of(running), kill_of("r-0-1"), kill_of("e-0-1"), placement_of(early)])
    stage.tick(time.monotonic())
    statuses = [(v["task_id"], v["state"], v["reason"]) for v in statuses_sent(out.take("task-status"))]
    assert ("r-0-1", "TASK_KILLED", "PREEMPTED") in statuses
    assert ("e-0-1", "TASK_KILLED", "PREEMPTED") in statuses
    assert not [s for s in statuses if s[0] == "e-0-1" and s[1] != "TASK_KILLED"], "the killed run started"
    assert store.launch_counts("e") == {0: 1}  # its one claim is the kill's: a later placement is a repeat
    assert stage.running == {}
    # Another shard's host manager sees the same kill: the run is claimed already, it does nothing.
    other = LaunchStage(store)
    other_out = bound(other, hosts="sim:1:cpu=8", sim_task_seconds=600)
    other._kills([kill_of("r-0-1"), kill_of("e-0-1")])
    assert other_out.take("task-status") == []


def test_launch_forgets_runs_that_ended_longer_ago_than_their_placements_are_kept(store) -> None:
    from peloton.runtime.record import now_ms
    from peloton.store import CLAIMS_KEPT_MS, Launch

    stage = LaunchStage(store)
    bound(stage, hosts="sim:1:cpu=8", sim_task_seconds=600)
    store.claim_launches([Launch(t, "x", i, 1, "sim-0", 1, 1, 1, 0, 5) for i, t in enumerate(("old", "new"))])
    store.end_launches(["old"], 1_000)
    store.end_launches(["new"], now_ms() - CLAIMS_KEPT_MS + 60_000)
    stage.tick(10.0)  # the first tick sweeps, the next ones an hour later
    assert store.launch_counts("x") == {1: 1}
    store.claim_launches([Launch("old2", "x", 2, 1, "sim-0", 1, 1, 1, 0, 5, 1_000)])
    stage.tick(20.0)
    assert store.launch_counts("x") == {1: 1, 2: 1}
    stage.tick(10.0 + stage.claim_sweep.every)
    assert store.launch_counts("x") == {1: 1}


def test_a_host_manager_waits_for_an_agent_to_read_a_late_launch_and_counts_it(store) -> None:
    from peloton import metrics

    shard = partition_for("agent-x", 4)
    stage = LaunchStage(store)
    out = bound(stage, hosts="", agent_heartbeat_s=1.0)
    stage.on_assign([("placements", p) for p in range(4)])
    asked = []
    stage.ends = lambda topic, partitions: asked.append(topic) or {p: 12 for p in partitions}
    stage.handle([agent_report("agent-x", [], shard, read=3)])
    placement = placement_of(one_task_gang("a-0-1"), host_id="agent-x")
    stage.handle([Record(placement.topic, shard, placement.offset, placement.key, placement.schema, placement.value,
                         placement.raw_key, placement.raw_value)])
    stage.tick(time.monotonic())
    assert [t["task_id"] for _, _, _, c in out.take("agent-commands") for t in c["launches"]] == ["a-0-1"]
    out.take()
    sent = stage.remote.runs["a-0-1"][1]
    stage.remote._clock = lambda: sent + stage.settings.agent_timeout_s + 1  # past the grace
    stage.handle([agent_report("agent-x", [], shard, read=5)])  # the agent has not read the launch
    stage.tick(time.monotonic())
    assert "a-0-1" in stage.remote.runs and asked == ["agent-commands"]
    assert metrics.UNREAD_LAUNCHES._value.get() == 1
    assert not [v for _, _, _, v in out.take("task-status") if v.get("state") == "TASK_LOST"]
    stage.handle([agent_report("agent-x", [], shard, read=12)])  # read past it, and does not run it
    stage.tick(time.monotonic())
    assert [v["reason"] for _, _, _, v in out.take("task-status") if v.get("state") == "TASK_LOST"] == [
        "REASON_RECONCILIATION"]
    assert metrics.UNREAD_LAUNCHES._value.get() == 0


def test_a_host_manager_that_takes_over_waits_for_its_agents_and_launches_what_never_went_out(store) -> None:
    from peloton.store import Launch

    shard = partition_for("agent-x", 4)
    # The last owner claimed the run and died before its launch (and the placement's offset) committed.
    store.claim_launches([Launch("a-0-1", "a", 0, 1, "agent-x", 1.0, 16.0, 1.0, 0.0, 5)])
    stage = LaunchStage(store)
    out = bound(stage, hosts="", agent_heartbeat_s=1.0)
    stage.on_assign([("placements", p) for p in range(4)])
    out.take()
    placement = placement_of(one_task_gang("a-0-1"), host_id="agent-x")
    placement = Record(placement.topic, shard, placement.offset, placement.key, placement.schema, placement.value,
                       placement.raw_key, placement.raw_value)
    stage.handle([placement])  # the placement, read again; agent-x has not reported to this owner yet
    assert out.take("agent-commands") == [] and not [s for s in out.take("task-status") if s[3].get("state") ==
                                                      "TASK_DROPPED"], "refused before the host could report"
    assert stage.held_offsets() == {("placements", shard): placement.offset}
    stage.handle([agent_report("agent-x", [], shard)])  # it reports, without the run
    stage.tick(time.monotonic())
    [(_, _, _, launch)] = out.take("agent-commands")
    assert [t["task_id"] for t in launch["launches"]] == ["a-0-1"]
    assert ("LAUNCHING", [0]) in [(v["state"], [r["instance"] for r in v["runs"]])
                                  for _, _, _, v in out.take("task-status") if "runs" in v]
    assert stage.held_offsets() == {}
    assert store.launch_counts("a") == {0: 1}
