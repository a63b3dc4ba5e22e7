"""Placing gangs: all or nothing, constraints counting every task on a host, the strategies'
examples from Peloton's docs. Checks, rankers, ports, host views and "why pending" each have
their own test_place_*.py."""

from __future__ import annotations

import json

import pytest

from peloton.model.constraint import AndConstraint, ConstraintError, LabelConstraint, OrConstraint, evaluate
from peloton.model.resources import Resources
from stages.place import placement
from stages.place.host_view import HostView
from stages.place.placement import HostRing, LastCandidates, place_gang
from stages.place.task_need import LaunchSpecError, TaskNeed


def host(name: str, cpu: float = 4, **labels) -> HostView:
    return HostView(name, 0, Resources(cpu=cpu, mem_mb=1000), labels={"hostname": name, **labels})


def need(task_id: str, cpu: float = 1, constraint=None, labels=None, job_id: str = "j") -> TaskNeed:
    return TaskNeed(task_id, Resources(cpu=cpu, mem_mb=10), constraint, labels or {}, job_id)


def record(h: HostView, placement_id: str, needs: list[TaskNeed], placed: dict, expiry: float = 100.0) -> None:
    """What the place stage does once a gang is placed: every task counts on its host."""
    for n in needs:
        a = placed[n.task_id]
        a.host.add_pending(placement_id, expiry, n.resources, n.labels, n.job_id, a.ports)


def test_pack_fills_a_host_before_the_next() -> None:
    hosts = [host("a", cpu=2), host("b", cpu=2)]
    placed = place_gang([need("t1"), need("t2"), need("t3")], hosts, now=0)
    assert [placed[t].host_id for t in ("t1", "t2", "t3")] == ["a", "a", "b"]


def test_the_ring_deals_hosts_of_different_shards_in_turn_and_keeps_its_cursors_on_their_hosts() -> None:
    # as host state arrives: grouped by shard (its partitions read one after another)
    shards = {"c": 2, "a": 2, "h": 2, "e": 0, "b": 0, "g": 0, "d": 1, "i": 1, "f": 1, "j": 3}
    ring = HostRing([HostView(name, shard, Resources(cpu=2, mem_mb=1000)) for name, shard in shards.items()])
    ring.pack_at, ring.spread_at = 4, 9  # on b and j
    ring.interleave_shards()
    assert [h.host_id for h in ring] == ["b", "d", "a", "j", "e", "f", "c", "g", "i", "h"]
    assert (ring.hosts[ring.pack_at].host_id, ring.hosts[ring.spread_at].host_id) == ("b", "j")
    assert ring.index_of("i") == 8


def test_a_rerun_avoids_the_host_its_last_run_failed_on_unless_no_other_fits() -> None:
    hosts = [host("a", cpu=2), host("b", cpu=1)]
    assert place_gang([need("t1")], hosts, now=0, avoid={"a"})["t1"].host_id == "b"
    assert place_gang([need("t1", cpu=2)], hosts, now=0, avoid={"a"})["t1"].host_id == "a"  # only a fits


def test_a_gang_is_placed_all_or_nothing() -> None:
    hosts = [host("a", cpu=2)]
    assert place_gang([need("t1"), need("t2"), need("t3")], hosts, now=0) is None


def test_a_gang_that_finds_no_host_changes_no_host_and_no_cursor() -> None:
    ring = HostRing([host("a", cpu=2), host("b", cpu=2)])
    ring.pack_at = 1
    assert place_gang([need("t1"), need("t2"), need("t3"), need("t4"), need("t5")], ring, now=0) is None
    assert ring.pack_at == 1
    assert all(not h.pending and h.free(0).cpu == 2 for h in ring)


@pytest.mark.parametrize("strategy", ["PACK_HOST", "SPREAD_JOB"])
def test_a_jobs_one_task_gangs_in_a_row_start_from_the_last_ones_candidates(monkeypatch, strategy) -> None:
    walks = []
    real = placement._walk
    monkeypatch.setattr(placement, "_walk", lambda *a: walks.append(1) or real(*a))
    ring = HostRing([host(f"h{i}", cpu=2) for i in range(40)])
    last = LastCandidates()
    for i in range(12):  # as place's tick: each placement counted on its host before the next gang
        placed = place_gang([need(f"t{i}")], ring, now=0, strategy=strategy, last=last)
        record(ring.hosts[0], f"p{i}", [need(f"t{i}")], placed)
    assert len(walks) == 1  # the first gang walked; the others took its 16 candidates again
    # No host was given more than it has, though each gang saw the hosts through the last one's
    # candidates: the host the last gang took is looked at again.
    assert all(h.free(0).cpu >= 0 for h in ring)
    assert sum(2 - h.free(0).cpu for h in ring) == 12
    if strategy == "SPREAD_JOB":
        assert sum(1 for h in ring if h.free(0).cpu < 2) == 12  # one each: the job's tasks spread
    else:
        assert sorted(h.free(0).cpu for h in ring if h.free(0).cpu < 2) == [0] * 6  # hosts filled in turn
    # A gang of other needs, of two tasks, or one that finds no host carries nothing on.
    place_gang([need("x", cpu=2)], ring, now=0, strategy=strategy, last=last)
    assert last.need is not None and last.need.task_id == "x"
    place_gang([need("y1"), need("y2")], ring, now=0, strategy=strategy, last=last)
    assert last.need is None
    place_gang([need("z")], ring, now=0, strategy=strategy, last=last)
    assert place_gang([need("big", cpu=3)], ring, now=0, strategy=strategy, last=last) is None
    assert last.need is None


def test_an_empty_gang_takes_nothing_and_no_hosts_place_nothing() -> None:
    assert place_gang([], [host("a")], now=0) == {}
    assert place_gang([need("t1")], [], now=0) is None


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
    assert evaluate(OrConstraint((other, zone)), labels, {})
    assert not evaluate(AndConstraint((other, zone)), labels, {})
    assert evaluate(AndConstraint((zone, OrConstraint((other, zone)))), labels, {})
    assert evaluate(LabelConstraint("HOST", "EQUAL", "zone", "z2", 0), labels, {})  # "not in zone z2"
    assert evaluate(None, labels, {})


def test_task_label_constraints_compare_the_count_of_tasks_on_the_host() -> None:
    one_per_host = LabelConstraint("TASK", "EQUAL", "app", "web", 0)
    assert evaluate(one_per_host, {}, {})
    assert evaluate(one_per_host, {}, {("app", "db"): 3})
    assert not evaluate(one_per_host, {}, {("app", "web"): 1})
    at_most_two = LabelConstraint("TASK", "LESS_THAN", "app", "web", 2)
    assert evaluate(at_most_two, {}, {("app", "web"): 1})
    assert not evaluate(at_most_two, {}, {("app", "web"): 2})
    more_than_one = LabelConstraint("TASK", "GREATER_THAN", "app", "web", 1)
    assert not evaluate(more_than_one, {}, {("app", "web"): 1})
    assert evaluate(more_than_one, {}, {("app", "web"): 2})
    # a host label of the same name is not a task on the host
    assert evaluate(one_per_host, {"app": "web"}, {})


def test_task_constraints_count_the_tasks_the_host_manager_reports() -> None:
    one_per_host = LabelConstraint("TASK", "EQUAL", "app", "web", 0)
    busy = HostView("a", 0, Resources(cpu=4, mem_mb=1000), task_labels={("app", "web"): 1})
    idle = HostView("b", 0, Resources(cpu=4, mem_mb=1000))
    placed = place_gang([need("t1", constraint=one_per_host, labels={"app": "web"})], [busy, idle], now=0)
    assert placed["t1"].host_id == "b"


def test_a_gang_spreads_when_its_tasks_exclude_each_other() -> None:
    spread = LabelConstraint("TASK", "EQUAL", "app", "web", 0)
    needs = [need(f"t{i}", constraint=spread, labels={"app": "web"}) for i in range(2)]
    placed = place_gang(needs, [host("a"), host("b")], now=0)
    assert [placed[t].host_id for t in ("t0", "t1")] == ["a", "b"]
    assert place_gang(needs + [need("t2", constraint=spread, labels={"app": "web"})],
                      [host("a"), host("b")], now=0) is None


def test_pelotons_host_limit_example_one_instance_per_host_across_gangs() -> None:
    """4 instances that each exclude their kind from their host, 3 hosts, placed one gang at a
    time with each placement recorded on its host: 3 hosts take one each, the 4th finds none."""
    one_per_host = LabelConstraint("TASK", "EQUAL", "app", "web", 0)
    ring = HostRing([host(name, cpu=8) for name in ("a", "b", "c")])
    used = []
    for i in range(3):
        gang = [need(f"j-{i}-1", constraint=one_per_host, labels={"app": "web"})]
        placed = place_gang(gang, ring, now=0)
        assert placed is not None, i
        record(placed[gang[0].task_id].host, f"p{i}", gang, placed)
        used.append(placed[gang[0].task_id].host_id)
    assert sorted(used) == ["a", "b", "c"]
    assert place_gang([need("j-3-1", constraint=one_per_host, labels={"app": "web"})], ring, now=0) is None


def test_spread_puts_a_jobs_gangs_on_different_hosts_where_pack_stacks_them() -> None:
    def run(strategy: str) -> set[str]:
        ring = HostRing([host(f"h{i}", cpu=6) for i in range(6)])
        chosen = set()
        for i in range(6):
            gang = [need(f"j-{i}-1")]
            placed = place_gang(gang, ring, now=0, strategy=strategy)
            record(placed[gang[0].task_id].host, f"p{i}", gang, placed)
            chosen.add(placed[gang[0].task_id].host_id)
        return chosen

    assert len(run("SPREAD_JOB")) == 6
    assert run("PACK_HOST") == {"h0"}
    assert run("anything else packs") == {"h0"}


def spec_with(constraint_json=None, **fields) -> dict:
    return {"task_id": "t1", "job_id": "j1", "resources": Resources(cpu=1).to_record(), "labels": {"app": "web"},
            "constraint_json": constraint_json, **fields}


def test_task_need_reads_the_canonical_constraint_json() -> None:
    record_ = {"type": "LABEL", "labelconstraint": {"kind": "HOST", "condition": "EQUAL", "requirement": 1,
                                                   "label": {"key": "hostname", "value": "b"}}}
    need_ = TaskNeed.from_spec(spec_with(json.dumps(record_)))
    assert need_.constraint == LabelConstraint("HOST", "EQUAL", "hostname", "b", 1)
    assert (need_.job_id, need_.labels) == ("j1", {"app": "web"})
    assert TaskNeed.from_spec(spec_with(None)).constraint is None


@pytest.mark.parametrize("bad", ["{", "[" * 100_000, '{"type": "AND"}', '"x"', "17"])
def test_a_bad_constraint_json_fails_when_the_spec_is_decoded(bad: str) -> None:
    with pytest.raises(ConstraintError):
        TaskNeed.from_spec(spec_with(bad))


def test_task_need_reads_dynamic_ports_or_the_port_list_which_wins() -> None:
    assert (TaskNeed.from_spec(spec_with()).dynamic_ports, TaskNeed.from_spec(spec_with()).static_ports) == (0, ())
    assert TaskNeed.from_spec(spec_with(dynamic_ports=2)).dynamic_ports == 2
    ports = [{"name": "http", "value": 0, "env_name": "PORT_HTTP"}, {"name": "admin", "value": 8080, "env_name": ""},
             {"name": "debug", "value": 0, "env_name": "PORT_DEBUG"}, {"name": "grpc", "value": 9090, "env_name": ""}]
    need_ = TaskNeed.from_spec(spec_with(dynamic_ports=5, ports=ports))
    assert (need_.dynamic_ports, need_.static_ports) == (2, (8080, 9090))


@pytest.mark.parametrize("fields", [
    {"dynamic_ports": -1}, {"dynamic_ports": True}, {"ports": "8080"}, {"ports": [{"value": 70_000}]},
    {"ports": [{"value": -5}]}, {"ports": [{"value": "80"}]}, {"ports": [17]},
    {"ports": [{"value": 8080}, {"value": 8080}]},
])
def test_ports_no_host_could_give_fail_when_the_spec_is_decoded(fields: dict) -> None:
    with pytest.raises(LaunchSpecError):
        TaskNeed.from_spec(spec_with(**fields))


def test_an_in_place_replacement_goes_back_to_its_host_where_it_fits_and_elsewhere_when_not() -> None:
    hosts = [host("a", cpu=2), host("b", cpu=2), host("c", cpu=2)]
    back = TaskNeed("t1", Resources(cpu=1, mem_mb=10), job_id="j", prefer_host="c")
    assert place_gang([back], hosts, now=0)["t1"].host_id == "c"  # PACK alone would take a
    too_big = TaskNeed("t2", Resources(cpu=3, mem_mb=10), job_id="j", prefer_host="c")
    assert place_gang([too_big, need("t3")], [host("a", cpu=4), host("c", cpu=2)], now=0)["t2"].host_id == "a"
    gone = TaskNeed("t4", Resources(cpu=1, mem_mb=10), job_id="j", prefer_host="no-such-host")
    assert place_gang([gone], hosts, now=0)["t4"].host_id == "a"
    # Two of a gang preferring their own hosts each get theirs, and the room taken counts.
    pair = [TaskNeed(f"p{i}", Resources(cpu=2, mem_mb=10), job_id="j", prefer_host=h) for i, h in enumerate("bb")]
    placed = place_gang(pair, hosts, now=0)
    assert placed["p0"].host_id == "b" and placed["p1"].host_id != "b"


def test_a_launch_spec_names_the_host_it_prefers() -> None:
    spec = {"task_id": "j-0-2", "job_id": "j", "resources": {"cpu": 1, "mem_mb": 1, "disk_mb": 0, "gpu": 0},
            "prefer_host": "h7"}
    assert TaskNeed.from_spec(spec).prefer_host == "h7"
    assert not TaskNeed.from_spec(spec).same_needs(TaskNeed.from_spec({**spec, "task_id": "j-1-2"}))


def test_alike_specs_one_after_another_share_what_they_ask_and_a_change_is_read_anew() -> None:
    base = spec_with(json.dumps({"type": "LABEL", "labelconstraint": {
        "kind": "HOST", "condition": "EQUAL", "requirement": 1, "label": {"key": "rack", "value": "a"}}}))
    first, second = TaskNeed.from_spec(base), TaskNeed.from_spec({**base, "task_id": "t2", "job_id": "j2"})
    assert (second.task_id, second.job_id) == ("t2", "j2") and first.task_id == "t1"
    assert second.constraint is first.constraint and second.same_needs(first) is False  # another job
    ports = [{"name": "http", "value": 8080, "env_name": ""}]
    changed = [TaskNeed.from_spec({**base, "labels": {"app": "db"}}), TaskNeed.from_spec({**base, "ports": ports}),
               TaskNeed.from_spec({**base, "resources": Resources(cpu=3).to_record()}),
               TaskNeed.from_spec({**base, "constraint_json": None}), TaskNeed.from_spec({**base, "image": "img"})]
    assert [n.labels for n in changed[:2]] == [{"app": "db"}, {"app": "web"}]
    assert changed[1].static_ports == (8080,) and changed[2].static_ports == ()
    assert changed[2].resources == Resources(cpu=3) and changed[3].constraint is None and changed[4].image == "img"
    with pytest.raises(LaunchSpecError):  # a bad spec after good alike ones still fails
        TaskNeed.from_spec({**base, "ports": [{"value": 8080}, {"value": 8080}]})
    assert TaskNeed.from_spec(base).constraint == first.constraint
