from __future__ import annotations

from peloton.model.resources import Resources
from stages.place.placement import HostView, TaskNeed, place_gang, satisfies


def host(name: str, cpu: float = 4, **labels) -> HostView:
    return HostView(name, 0, Resources(cpu=cpu, mem_mb=1000), labels={"hostname": name, **labels})


def need(task_id: str, cpu: float = 1, constraint=None) -> TaskNeed:
    return TaskNeed(task_id, Resources(cpu=cpu, mem_mb=10), constraint, {})


def test_first_fit_fills_a_host_before_the_next() -> None:
    hosts = [host("a", cpu=2), host("b", cpu=2)]
    placed = place_gang([need("t1"), need("t2"), need("t3")], hosts, now=0)
    assert [placed[t].host_id for t in ("t1", "t2", "t3")] == ["a", "a", "b"]


def test_a_gang_is_placed_all_or_nothing() -> None:
    hosts = [host("a", cpu=2)]
    assert place_gang([need("t1"), need("t2"), need("t3")], hosts, now=0) is None


def test_pending_placements_count_until_reported_or_expired() -> None:
    h = host("a", cpu=2)
    h.pending["p1"] = (10.0, Resources(cpu=2))
    assert place_gang([need("t1")], [h], now=5.0) is None
    assert place_gang([need("t1")], [h], now=11.0) is not None  # the TTL passed


def test_hosts_in_maintenance_take_nothing() -> None:
    h = host("a")
    h.state = "DRAINING"
    assert place_gang([need("t1")], [h], now=0) is None


def test_host_affinity_constraint_from_pelotons_example() -> None:
    pin = {"type": 1, "labelconstraint": {"kind": 2, "condition": 2, "requirement": 1,
                                         "label": {"key": "hostname", "value": "b"}}}
    placed = place_gang([need("t1", constraint=pin)], [host("a"), host("b")], now=0)
    assert placed["t1"].host_id == "b"
    assert place_gang([need("t1", constraint=pin)], [host("a")], now=0) is None


def test_and_or_and_task_label_constraints() -> None:
    h = host("a", zone="z1")
    zone = {"type": 1, "labelconstraint": {"kind": 2, "condition": 2, "requirement": 1, "label": {"key": "zone", "value": "z1"}}}
    other = {"type": 1, "labelconstraint": {"kind": 2, "condition": 2, "requirement": 1, "label": {"key": "zone", "value": "z2"}}}
    assert satisfies({"type": 3, "orconstraint": {"constraints": [other, zone]}}, h, [])
    assert not satisfies({"type": 2, "andconstraint": {"constraints": [other, zone]}}, h, [])
    one_per_host = {"type": 1, "labelconstraint": {"kind": 1, "condition": 2, "requirement": 0,
                                                  "label": {"key": "app", "value": "web"}}}
    assert satisfies(one_per_host, h, [])
    assert not satisfies(one_per_host, h, [{"app": "web"}])
