"""Revocable runs on a host's slack, as the host manager keeps it: what non-revocable runs leave
unallocated and what they hold but do not use, lent and taken back youngest first."""

from __future__ import annotations

import time

from peloton.model.resources import Resources
from stages.launch.ledger import HostLedger, judge_placement
from stages.launch.stage import LaunchStage
from tests.builders.stages import bound, one_task_gang, placement_of
from tests.unit.stages.launch.test_launch_stage import statuses_sent


def cpu(n: float) -> Resources:
    return Resources(cpu=n, mem_mb=1.0)


def test_revocable_runs_take_unallocated_cpu_then_what_the_measured_runs_leave_unused() -> None:
    ledger = HostLedger("h", Resources(cpu=4, mem_mb=100))
    assert ledger.try_reserve("owner", cpu(3))
    assert ledger.try_reserve("r1", cpu(1), revocable=True)  # the one cpu nobody holds
    assert not ledger.try_reserve("r2", cpu(1), revocable=True)
    assert ledger.held.total == Resources(cpu=3, mem_mb=2)  # a revocable run's cpu is not in `held`
    assert ledger.measure([{"task_id": "owner", "cpu": 0.05, "mem_mb": 10.0, "revocable": False},
                           {"task_id": "gone", "cpu": 1.0, "mem_mb": 1.0, "revocable": False}])
    assert abs(ledger.lent - 2.9) < 1e-9  # in steps, below what is unused: 2.95
    assert ledger.try_reserve("r2", cpu(1), revocable=True)
    assert ledger.try_reserve("r3", cpu(1), revocable=True)
    assert not ledger.try_reserve("r4", cpu(1), revocable=True)  # 0.95 left
    assert not ledger.measure([{"task_id": "owner", "cpu": 0.06, "mem_mb": 10.0, "revocable": False}])  # same step
    verdict = judge_placement([{"host_id": "h", "task": {"task_id": "r4", "revocable": True,
                                                          "resources": cpu(1).to_record()}}],
                              {"h": ledger}, running=set(), served={"h"})
    assert [why for _, _, why in verdict.refused] == [
        "host no longer has room for the task (a revocable task's cpu comes from the host's slack)"]


def test_slack_is_taken_back_youngest_first_when_non_revocable_runs_want_it() -> None:
    ledger = HostLedger("h", Resources(cpu=4, mem_mb=100))
    ledger.try_reserve("owner", cpu(3))
    ledger.measure([{"task_id": "owner", "cpu": 0.0, "mem_mb": 1.0, "revocable": False}])
    for r in ("r1", "r2", "r3", "r4"):
        assert ledger.try_reserve(r, cpu(1), revocable=True)
    assert ledger.over_slack(set()) == []
    ledger.try_reserve("newcomer", cpu(1))  # non-revocable: the host's last unallocated cpu
    assert ledger.over_slack(set()) == ["r4"]
    assert ledger.over_slack({"r4"}) == []  # being killed already: counted as gone
    # The owner uses 2.5 of its 3 cpu: it lends 0.5, and only 0 of the rest is free.
    ledger.measure([{"task_id": "owner", "cpu": 2.5, "mem_mb": 1.0, "revocable": False}])
    assert ledger.over_slack({"r4"}) == ["r3", "r2", "r1"]
    ledger.release("r4")
    ledger.release("newcomer")
    assert ledger.over_slack(set()) == ["r3", "r2"]  # slack 1.5: one whole run stays


def test_a_measurement_that_makes_no_sense_lends_nothing() -> None:
    ledger = HostLedger("h", Resources(cpu=4, mem_mb=100))
    ledger.try_reserve("owner", cpu(3))
    for nonsense in (-5.0, float("nan"), float("inf")):
        ledger.measure([{"task_id": "owner", "cpu": nonsense, "mem_mb": 1.0, "revocable": False}])
        assert ledger.unused_cpu() == 0 and ledger.slack_room() == 1


def test_a_run_its_agent_says_is_revocable_moves_to_slack() -> None:
    ledger = HostLedger("h", Resources(cpu=4, mem_mb=100))
    ledger.hold("adopted", cpu(2))  # from the store: charged whole, not known to be revocable
    assert ledger.measure([{"task_id": "adopted", "cpu": 0.5, "mem_mb": 1.0, "revocable": True}])
    assert ledger.held.total.cpu == 0 and ledger.revocable == {"adopted": 2}
    assert ledger.unused_cpu() == 0  # a revocable run lends nothing


def test_the_host_manager_preempts_the_revocable_run_a_placed_owner_needs_the_cpu_of(store) -> None:
    stage = LaunchStage(store)
    out = bound(stage, hosts="sim:1:cpu=4", sim_task_seconds=600)
    stage.on_assign([("placements", p) for p in range(4)])
    out.take()
    owner, borrower, newcomer = one_task_gang("o-0-1", cpu=3), one_task_gang("b-0-1"), one_task_gang("n-0-1")
    lent = placement_of(borrower)
    lent.value["revocable"] = True
    stage.handle([placement_of(owner), lent])
    stage.tick(time.monotonic())
    assert set(stage.running) == {"o-0-1", "b-0-1"}
    [state] = [v for _, _, _, v in out.take("host-state")][-1:]
    assert (state["allocated"]["cpu"], state["revocable_cpu"], state["unused_cpu"]) == (3.0, 1.0, 0.0)
    stage.handle([placement_of(newcomer)])  # no agent measures a simulated host: nothing is lent
    stage.tick(time.monotonic())
    stage.tick(time.monotonic())
    ends = [(v["task_id"], v["state"], v["reason"], v["message"]) for v in statuses_sent(out.take("task-status"))
            if v["state"] == "TASK_KILLED"]
    assert [e[:3] for e in ends] == [("b-0-1", "TASK_KILLED", "PREEMPTED")]
    assert "non-revocable runs need its cpu back" in ends[0][3]
    assert set(stage.running) == {"o-0-1", "n-0-1"}
    assert stage.slack_preemptions == 1
