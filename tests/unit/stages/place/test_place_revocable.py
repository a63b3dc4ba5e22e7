"""Revocable gangs are placed on the hosts' slack: capacity less non-revocable allocations, plus
what the host manager says those runs hold unused, less what revocable runs hold already."""

from __future__ import annotations

from peloton.model.resources import Resources
from stages.place.host_view import HostView
from stages.place.placement import explain, place_gang
from stages.place.task_need import TaskNeed


def need(task_id: str, cpu: float, revocable: bool) -> TaskNeed:
    return TaskNeed(task_id, Resources(cpu=cpu, mem_mb=10), job_id="j", revocable=revocable)


def test_a_hosts_slack_is_what_it_leaves_unallocated_and_what_its_runs_lend() -> None:
    h = HostView("a", 0, Resources(cpu=8, mem_mb=1000))
    h.report(Resources(cpu=6, mem_mb=100), revocable_cpu=1, unused_cpu=3)
    assert h.free(0) == Resources(cpu=2, mem_mb=900)
    assert h.slack_free(0) == Resources(cpu=4, mem_mb=900)
    h.add_pending("p", 10.0, Resources(cpu=3, mem_mb=50), revocable=True)  # on the slack, not the free cpu
    assert h.slack_free(0) == Resources(cpu=1, mem_mb=850)
    assert h.free(0) == Resources(cpu=2, mem_mb=850)
    h.applied("p")
    assert h.slack_free(0) == Resources(cpu=4, mem_mb=900)


def test_revocable_tasks_go_where_slack_is_and_others_where_cpu_is_free() -> None:
    lending = HostView("lending", 0, Resources(cpu=4, mem_mb=1000))
    lending.report(Resources(cpu=4, mem_mb=100), unused_cpu=3)  # full, but its runs use 1 cpu
    empty = HostView("empty", 0, Resources(cpu=1, mem_mb=1000))
    chosen = place_gang([need("r-0", 2, True), need("r-1", 1, True)], [lending, empty], now=0)
    assert chosen is not None and {t: a.host_id for t, a in chosen.items()} == {"r-0": "lending", "r-1": "lending"}
    assert place_gang([need("n-0", 2, False)], [lending, empty], now=0) is None
    assert place_gang([need("r-9", 5, True)], [lending, empty], now=0) is None
    assert explain([need("r-9", 5, True)], [lending, empty], now=0) == (
        "task r-9 fits on none of 2 hosts: no slack for 5 revocable cpu on 2")


def test_a_revocable_and_a_non_revocable_task_never_share_candidates() -> None:
    assert not need("a", 1, True).same_needs(need("b", 1, False))
