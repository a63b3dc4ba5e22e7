"""Ports: static ones as asked, dynamic ones from the host's free range, none given twice."""

from __future__ import annotations

from peloton.model.resources import Resources
from stages.place.host_view import HostView
from stages.place.placement import HostRing, place_gang
from stages.place.task_need import TaskNeed


def host(name: str = "a", ranges=((31000, 31004),), used=(), cpu: float = 16) -> HostView:
    return HostView(name, 0, Resources(cpu=cpu, mem_mb=1000), labels={"hostname": name}, port_ranges=ranges,
                    used_ports=set(used))


def task(task_id: str, dynamic: int = 0, static: tuple[int, ...] = ()) -> TaskNeed:
    return TaskNeed(task_id, Resources(cpu=1), job_id="j", dynamic_ports=dynamic, static_ports=static)


def place_and_record(needs: list[TaskNeed], hosts, placement_id: str) -> dict:
    placed = place_gang(needs, hosts, now=0)
    if placed is not None:
        for n in needs:
            a = placed[n.task_id]
            a.host.add_pending(placement_id, 100.0, n.resources, n.labels, n.job_id, a.ports)
    return placed


def test_static_ports_come_first_in_the_order_given_then_the_lowest_free_dynamic_ones() -> None:
    placed = place_gang([task("t", dynamic=2, static=(31003, 31001))], [host(used={31000})], now=0)
    assert placed["t"].ports == (31003, 31001, 31002, 31004)


def test_a_task_without_ports_gets_none() -> None:
    assert place_gang([task("t")], [host()], now=0)["t"].ports == ()


def test_dynamic_ports_come_from_every_range_of_the_host() -> None:
    h = host(ranges=((100, 101), (200, 202)), used={100})
    assert place_gang([task("t", dynamic=3)], [h], now=0)["t"].ports == (101, 200, 201)


def test_the_tasks_of_a_gang_never_share_a_port_on_a_host() -> None:
    placed = place_gang([task("t1", dynamic=2), task("t2", dynamic=2)], [host()], now=0)
    assert placed["t1"].ports == (31000, 31001)
    assert placed["t2"].ports == (31002, 31003)


def test_a_static_port_taken_by_the_gang_sends_the_next_task_elsewhere() -> None:
    placed = place_gang([task("t1", static=(31002,)), task("t2", static=(31002,))], [host("a"), host("b")], now=0)
    assert (placed["t1"].host_id, placed["t2"].host_id) == ("a", "b")
    assert place_gang([task("t1", static=(31002,)), task("t2", static=(31002,))], [host("a")], now=0) is None


def test_a_later_gang_does_not_reuse_ports_an_earlier_one_was_given() -> None:
    ring = HostRing([host()])
    first = place_and_record([task("t1", dynamic=2)], ring, "p1")
    second = place_and_record([task("t2", dynamic=2)], ring, "p2")
    assert first["t1"].ports == (31000, 31001)
    assert second["t2"].ports == (31002, 31003)
    assert place_and_record([task("t3", static=(31001,))], ring, "p3") is None


def test_ports_run_out_and_the_gang_waits_until_they_come_back() -> None:
    h = host(ranges=((31000, 31002),))
    ring = HostRing([h])
    assert place_and_record([task("t1", dynamic=2)], ring, "p1") is not None
    assert place_and_record([task("t2", dynamic=2)], ring, "p2") is None  # one port left
    h.applied("p1")  # the report covers p1 and lists no port in use: the task is gone already
    assert place_and_record([task("t2", dynamic=2)], ring, "p2")["t2"].ports == (31000, 31001)


def test_a_gang_that_needs_more_ports_than_any_host_has_free_is_not_placed() -> None:
    assert place_gang([task("t", dynamic=6)], [host(), host("b")], now=0) is None
    assert place_gang([task("t", static=(40000,))], [host()], now=0) is None  # outside the range


def test_ports_go_to_the_host_with_room_for_them() -> None:
    full = host("a", used=range(31000, 31005))
    placed = place_gang([task("t", dynamic=1)], [full, host("b")], now=0)
    assert (placed["t"].host_id, placed["t"].ports) == ("b", (31000,))


def test_reported_ports_stay_used_when_a_placement_with_them_is_applied() -> None:
    h = host()
    h.add_pending("p1", 100.0, Resources(cpu=1), ports=[31000, 31001])
    h.report(Resources(cpu=1), used_ports={31000})  # 31000 is now reported in use, 31001 still pending
    assert h.used_ports == {31000, 31001}
    h.applied("p1")
    assert h.used_ports == {31000}
