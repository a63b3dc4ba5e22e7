from __future__ import annotations

import json

import pytest

from peloton.model.constraint import AndConstraint, ConstraintError, LabelConstraint, OrConstraint, evaluate
from peloton.model.resources import Resources
from stages.place.placement import HostView, TaskNeed, explain, place_gang


def host(name: str, cpu: float = 4, **labels) -> HostView:
    return HostView(name, 0, Resources(cpu=cpu, mem_mb=1000), labels={"hostname": name, **labels})


def need(task_id: str, cpu: float = 1, constraint=None) -> TaskNeed:
    return TaskNeed(task_id, Resources(cpu=cpu, mem_mb=10), constraint, {})


def test_first_fit_fills_a_host_before_the_next() -> None:
    hosts = [host("a", cpu=2), host("b", cpu=2)]
    placed = place_gang([need("t1"), need("t2"), need("t3")], hosts, now=0)
    assert [placed[t].host_id for t in ("t1", "t2", "t3")] == ["a", "a", "b"]


def test_a_rerun_avoids_the_host_its_last_run_failed_on_unless_no_other_fits() -> None:
    hosts = [host("a", cpu=2), host("b", cpu=1)]
    assert place_gang([need("t1")], hosts, now=0, avoid={"a"})["t1"].host_id == "b"
    assert place_gang([need("t1", cpu=2)], hosts, now=0, avoid={"a"})["t1"].host_id == "a"  # only a fits


def test_a_gang_is_placed_all_or_nothing() -> None:
    hosts = [host("a", cpu=2)]
    assert place_gang([need("t1"), need("t2"), need("t3")], hosts, now=0) is None


def test_pending_placements_count_until_reported_or_expired() -> None:
    h = host("a", cpu=2)
    h.add_pending("p1", 10.0, Resources(cpu=2))
    assert place_gang([need("t1")], [h], now=5.0) is None
    assert place_gang([need("t1")], [h], now=11.0) is not None  # the TTL passed
    h.add_pending("p2", 30.0, Resources(cpu=1))
    h.add_pending("p2", 30.0, Resources(cpu=1))  # a placement of two tasks on this host
    assert place_gang([need("t1")], [h], now=12.0) is None
    h.applied("p2")  # the host manager reported it: its room is in `allocated` now
    assert place_gang([need("t1")], [h], now=12.0) is not None


def test_hosts_in_maintenance_take_nothing() -> None:
    h = host("a")
    h.state = "DRAINING"
    assert place_gang([need("t1")], [h], now=0) is None


def test_host_affinity_constraint_from_pelotons_example() -> None:
    pin = LabelConstraint("HOST", "EQUAL", "hostname", "b", 1)
    placed = place_gang([need("t1", constraint=pin)], [host("a"), host("b")], now=0)
    assert placed["t1"].host_id == "b"
    assert place_gang([need("t1", constraint=pin)], [host("a")], now=0) is None


def test_and_or_and_host_label_constraints() -> None:
    labels = {"hostname": "a", "zone": "z1"}
    zone = LabelConstraint("HOST", "EQUAL", "zone", "z1", 1)
    other = LabelConstraint("HOST", "EQUAL", "zone", "z2", 1)
    assert evaluate(OrConstraint((other, zone)), labels, [])
    assert not evaluate(AndConstraint((other, zone)), labels, [])
    assert evaluate(AndConstraint((zone, OrConstraint((other, zone)))), labels, [])
    assert evaluate(LabelConstraint("HOST", "EQUAL", "zone", "z2", 0), labels, [])  # "not in zone z2"
    assert evaluate(None, labels, [])


def test_task_label_constraints_count_the_tasks_already_on_the_host() -> None:
    one_per_host = LabelConstraint("TASK", "EQUAL", "app", "web", 0)
    assert evaluate(one_per_host, {}, [])
    assert evaluate(one_per_host, {}, [{"app": "db"}])
    assert not evaluate(one_per_host, {}, [{"app": "web"}])
    at_most_two = LabelConstraint("TASK", "LESS_THAN", "app", "web", 2)
    assert evaluate(at_most_two, {}, [{"app": "web"}])
    assert not evaluate(at_most_two, {}, [{"app": "web"}, {"app": "web"}])
    more_than_one = LabelConstraint("TASK", "GREATER_THAN", "app", "web", 1)
    assert not evaluate(more_than_one, {}, [{"app": "web"}])
    assert evaluate(more_than_one, {}, [{"app": "web"}] * 2)


def test_a_gang_spreads_when_its_tasks_exclude_each_other() -> None:
    spread = LabelConstraint("TASK", "EQUAL", "app", "web", 0)
    needs = [TaskNeed(f"t{i}", Resources(cpu=1), spread, {"app": "web"}) for i in range(2)]
    placed = place_gang(needs, [host("a"), host("b")], now=0)
    assert [placed[t].host_id for t in ("t0", "t1")] == ["a", "b"]
    assert place_gang(needs + [TaskNeed("t2", Resources(cpu=1), spread, {"app": "web"})],
                      [host("a"), host("b")], now=0) is None


def spec_with(constraint_json) -> dict:
    return {"task_id": "t1", "resources": Resources(cpu=1).to_record(), "labels": {},
            "constraint_json": constraint_json}


def test_task_need_reads_the_canonical_constraint_json() -> None:
    record = {"type": "LABEL", "labelconstraint": {"kind": "HOST", "condition": "EQUAL", "requirement": 1,
                                                  "label": {"key": "hostname", "value": "b"}}}
    need_ = TaskNeed.from_spec(spec_with(json.dumps(record)))
    assert need_.constraint == LabelConstraint("HOST", "EQUAL", "hostname", "b", 1)
    assert TaskNeed.from_spec(spec_with(None)).constraint is None


@pytest.mark.parametrize("bad", ["{", "[" * 100_000, '{"type": "AND"}', '"x"', "17"])
def test_a_bad_constraint_json_fails_when_the_spec_is_decoded(bad: str) -> None:
    with pytest.raises(ConstraintError):
        TaskNeed.from_spec(spec_with(bad))


def test_explain_counts_the_hosts_that_fail_each_check() -> None:
    hosts = [host("a", cpu=1), host("b", cpu=8, rack="x"), host("c", cpu=8, rack="y")]
    hosts[2].state = "DRAINING"
    pinned = LabelConstraint("HOST", "EQUAL", "rack", "z", 1)
    why = explain([need("t1", cpu=2, constraint=pinned)], hosts, now=0)
    assert why == "task t1 fits on none of 3 hosts: 1 without room (cpu on 1); 1 refused by its constraint; 1 not UP"
    assert explain([need("t1")], [], now=0) == "no hosts are known yet"
    together = explain([need("t1", cpu=3), need("t2", cpu=3)], [host("a", cpu=4)], now=0)
    assert together == "the gang's 2 tasks do not fit together on the room the hosts have free now"
