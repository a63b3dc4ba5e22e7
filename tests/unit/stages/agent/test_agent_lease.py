"""The agent's lease (stages/agent/lease.py), with no broker and a clock of the test's own."""

from __future__ import annotations

import pytest

from stages.agent.lease import HOLD_SHARE, Lease

LEASE, MARGIN = 10.0, 2.0
HOLD = HOLD_SHARE * MARGIN


def lease(until: float = 100.0) -> Lease:
    return Lease(LEASE, MARGIN, until)


def test_a_lease_runs_out_once_at_its_end_and_not_again_while_fenced() -> None:
    held = lease()
    assert not held.runs_out(99.9)
    assert held.runs_out(100.0)
    held.fence(100.0)
    assert held.fenced and not held.runs_out(200.0)


def test_a_launch_starts_only_with_the_margin_of_lease_left_and_never_while_fenced() -> None:
    held = lease()
    assert held.admits(100.0 - MARGIN) and not held.admits(100.0 - MARGIN + 0.01)
    held.fence(100.0)
    assert not held.admits(0.0)


def test_a_launch_may_wait_for_a_report_until_a_share_of_the_margin_past_the_lease() -> None:
    held = lease()
    assert held.may_hold(100.0 + HOLD) and not held.may_hold(100.0 + HOLD + 0.01)


def test_a_held_launch_waits_until_the_lease_and_its_share_of_the_margin() -> None:
    held = lease()
    held.hold("t1", "h1", {"task_id": "t1"}, partition=0, offset=7)
    assert held.held["t1"].until == 100.0 + HOLD
    assert held.overdue(100.0 + HOLD) == []
    late = held.overdue(100.0 + HOLD + 0.01)
    assert [(t, h.offset) for t, h in late] == [("t1", 7)] and not held.held


def test_a_report_sent_in_time_extends_the_lease_and_the_deadlines_of_the_launches_still_waiting() -> None:
    held = lease()
    held.hold("t1", "h1", {}, 0, 1)
    held.hold("t2", "h1", {}, 0, 2)
    held.held["t2"].until = 95.0  # its deadline passed before the answer came
    assert held.renewed(sent=99.0, now=96.0) is False  # not fenced: nothing to lift
    assert held.until == 99.0 + LEASE
    assert held.held["t1"].until == 99.0 + LEASE + HOLD
    assert held.held["t2"].until == 95.0
    assert held.renewed(sent=50.0, now=96.0) is False and held.until == 99.0 + LEASE  # never shortened


def test_only_a_report_sent_after_the_fence_lifts_it() -> None:
    held = lease()
    held.fence(100.0)
    assert held.renewed(sent=99.0, now=101.0) is False and held.fenced
    assert held.renewed(sent=100.5, now=101.0) is True and not held.fenced


def test_a_kill_takes_back_a_held_launch_and_a_release_takes_them_all() -> None:
    held = lease()
    held.hold("t1", "h1", {}, 0, 1)
    held.hold("t2", "h2", {}, 0, 2)
    assert held.drop("t1").host_id == "h1" and held.drop("t1") is None
    assert list(held.release()) == ["t2"] and held.held == {}


def test_the_offsets_reported_and_saved_stop_before_a_launch_still_held() -> None:
    held = lease()
    held.hold("t1", "h1", {}, partition=0, offset=7)
    assert held.before_held({0: 10, 1: 4, 2: None}) == {0: 7, 1: 4}
    assert held.before_held({0: 5}) == {0: 5}


def test_a_saved_lease_is_restored_on_the_clock_of_the_next_process() -> None:
    held = lease(until=100.0)
    saved = held.saved(now=90.0, wall=1_000.0)
    assert saved == {"until": 1_010.0}
    again = Lease.restored(LEASE, MARGIN, saved, now=5.0, wall=1_004.0)
    assert again.until == pytest.approx(11.0) and not again.fenced


@pytest.mark.parametrize("saved", [{}, None, [], {"until": "soon"}, "garbage"])
def test_no_lease_saved_or_one_garbled_gives_a_whole_lease_from_now(saved: object) -> None:
    assert Lease.restored(LEASE, MARGIN, saved, now=5.0, wall=1_000.0).until == 5.0 + LEASE


def test_the_status_says_how_much_lease_is_left_or_how_long_it_has_been_fenced() -> None:
    held = lease()
    assert held.status(90.0) == "lease 10s left"
    held.hold("t1", "h1", {}, 0, 1)
    held.fence(100.0)
    assert held.status(130.0) == "fenced for 30s, 1 launches held for a report"
