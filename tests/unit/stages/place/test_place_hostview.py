"""A host as a place instance sees it: what the host manager reported plus the placements in
flight, each of which counts until a report covers it or its expiry passes."""

from __future__ import annotations

import math

from peloton.model.resources import Resources
from stages.place.host_view import HostView

CAP = Resources(cpu=8, mem_mb=1000)


def test_a_pending_placement_counts_everything_a_later_gang_must_see() -> None:
    h = HostView("a", 0, CAP, task_labels={("app", "web"): 1}, job_tasks={"j1": 1}, used_ports={31000})
    h.add_pending("p1", 10.0, Resources(cpu=2), {"app": "web", "tier": "1"}, "j1", [31001])
    h.add_pending("p1", 10.0, Resources(cpu=1), {"app": "db"}, "j2", [31002])
    assert h.free(0) == Resources(cpu=5, mem_mb=1000)
    assert h.task_labels == {("app", "web"): 2, ("tier", "1"): 1, ("app", "db"): 1}
    assert h.job_tasks == {"j1": 2, "j2": 1}
    assert h.used_ports == {31000, 31001, 31002}


def test_applied_takes_the_placement_back_out_of_every_count() -> None:
    h = HostView("a", 0, CAP, task_labels={("app", "web"): 1}, job_tasks={"j1": 1}, used_ports={31000})
    h.add_pending("p1", 10.0, Resources(cpu=2), {"app": "web"}, "j1", [31001])
    h.applied("p1")
    assert (h.free(0), h.task_labels, h.job_tasks, h.used_ports) == (
        CAP, {("app", "web"): 1}, {"j1": 1}, {31000})
    h.applied("p1")  # twice, or one never made: nothing changes
    h.applied("unknown")
    assert h.free(0) == CAP


def test_an_expired_placement_leaves_every_count() -> None:
    h = HostView("a", 0, CAP)
    h.add_pending("p1", 10.0, Resources(cpu=2), {"app": "web"}, "j1", [31001])
    h.add_pending("p2", 20.0, Resources(cpu=3), {"app": "web"}, "j1", [31002])
    assert h.free(9.9).cpu == 3
    assert h.free(10.0).cpu == 5  # p1's expiry reached
    assert (h.task_labels, h.job_tasks, h.used_ports) == ({("app", "web"): 1}, {"j1": 1}, {31002})
    assert h.free(25.0) == CAP
    assert (h.task_labels, h.job_tasks, h.used_ports, h.pending, h.next_expiry) == ({}, {}, set(), {}, math.inf)


def test_a_placement_given_a_later_expiry_lives_until_then() -> None:
    h = HostView("a", 0, CAP)
    h.add_pending("p1", 10.0, Resources(cpu=1))
    h.add_pending("p1", 30.0, Resources(cpu=1))  # a second task of it, later
    assert h.free(15.0).cpu == 6
    assert h.free(31.0).cpu == 8


def test_a_report_replaces_the_reported_part_and_keeps_the_pending_one_on_top() -> None:
    h = HostView("a", 0, CAP)
    h.add_pending("p1", 10.0, Resources(cpu=2), {"app": "web"}, "j1", [31001])
    h.report(Resources(cpu=1), task_labels={("app", "db"): 1}, job_tasks={"j2": 1}, used_ports={31005})
    assert h.free(0).cpu == 5
    assert h.task_labels == {("app", "db"): 1, ("app", "web"): 1}
    assert h.job_tasks == {"j2": 1, "j1": 1}
    assert h.used_ports == {31005, 31001}
    # the next report covers p1: its counts move to the reported part and leave the pending one
    h.report(Resources(cpu=3), task_labels={("app", "db"): 1, ("app", "web"): 1}, job_tasks={"j2": 1, "j1": 1},
             used_ports={31005, 31001})
    h.applied("p1")
    assert (h.free(0).cpu, h.task_labels, h.job_tasks, h.used_ports) == (
        5, {("app", "db"): 1, ("app", "web"): 1}, {"j2": 1, "j1": 1}, {31005, 31001})


def test_a_report_without_task_counts_or_ports_leaves_those_as_they_are() -> None:
    h = HostView("a", 0, CAP, task_labels={("app", "web"): 1}, used_ports={31000})
    h.report(Resources(cpu=1))
    assert (h.allocated, h.task_labels, h.used_ports) == (Resources(cpu=1), {("app", "web"): 1}, {31000})


def test_free_follows_capacity_and_allocated_assigned_directly() -> None:
    h = HostView("a", 0, CAP)
    assert h.free(0).cpu == 8
    h.allocated = Resources(cpu=3)
    assert h.free(0).cpu == 5
    h.capacity = Resources(cpu=4, mem_mb=1000)
    assert h.free(0).cpu == 1


def test_many_placements_in_flight_expire_one_by_one() -> None:
    h = HostView("a", 0, Resources(cpu=1000, mem_mb=1000))
    for i in range(500):
        h.add_pending(f"p{i}", float(i + 1), Resources(cpu=1), {"app": "web"}, "j")
    for i in range(500):
        assert h.free(i + 0.5).cpu == 1000 - (500 - i)
    assert h.free(600).cpu == 1000 and h.task_labels == {} and h.job_tasks == {}
