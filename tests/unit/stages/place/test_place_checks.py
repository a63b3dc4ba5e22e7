"""Feasibility checks, one by one: each says why a host refuses a task, or lets it pass."""

from __future__ import annotations

import pytest

from peloton.model.constraint import AndConstraint, LabelConstraint, OrConstraint
from peloton.model.resources import Resources
from stages.place.checks import (
    CHECKS,
    GPU_KEPT,
    NOT_UP,
    LabelCounts,
    Tentative,
    checks_for,
    constraint_holds,
    describe_constraint,
    gpu_hosts_kept_for_gpu_tasks,
    host_is_up,
    ports_free,
    refusal,
    room_for_resources,
)
from stages.place.host_view import HostView
from stages.place.placement import place_gang
from stages.place.task_need import TaskNeed

BIG = Resources(cpu=8, mem_mb=8000, disk_mb=8000)


def host(capacity: Resources = BIG, **fields) -> HostView:
    fields.setdefault("labels", {"hostname": "h", "rack": "a"})
    return HostView("h", 0, capacity, **fields)


def task(cpu: float = 1, mem_mb: float = 100, disk_mb: float = 0, gpu: float = 0, **fields) -> TaskNeed:
    return TaskNeed("t", Resources(cpu=cpu, mem_mb=mem_mb, disk_mb=disk_mb, gpu=gpu), **fields)


def why(need: TaskNeed, h: HostView, share: Tentative | None = None) -> str | None:
    free = h.free(0) if share is None else h.free(0) - share.resources
    return refusal(need, h, free, share)


@pytest.mark.parametrize("state", ["DRAINING", "DRAINED", "DOWN"])
def test_a_host_in_maintenance_is_refused_as_not_up(state: str) -> None:
    h = host(state=state)
    assert host_is_up(task(), h, h.free(0), None) == NOT_UP
    assert why(task(), h) == NOT_UP


def test_an_up_host_passes_the_state_check() -> None:
    h = host()
    assert host_is_up(task(), h, h.free(0), None) is None


@pytest.mark.parametrize("asked, kind", [
    ({"cpu": 9}, "cpu"), ({"mem_mb": 8001}, "mem_mb"), ({"disk_mb": 9000}, "disk_mb"), ({"gpu": 1}, "gpu"),
    ({"cpu": 9, "mem_mb": 9000}, "cpu"),  # the first kind short is the one reported
])
def test_a_host_short_of_one_kind_is_refused_with_that_kind(asked: dict, kind: str) -> None:
    h = host(Resources(cpu=8, mem_mb=8000, disk_mb=8000, gpu=0))
    assert room_for_resources(task(**asked), h, h.free(0), None) == kind


def test_room_counts_what_is_allocated_and_pending_and_allows_eps() -> None:
    h = host(allocated=Resources(cpu=4, mem_mb=100))
    h.add_pending("p", 10.0, Resources(cpu=3))
    assert why(task(cpu=1), h) is None
    assert why(task(cpu=1.0005), h) is None  # within EPS, as Peloton compares
    assert why(task(cpu=1.01), h) == "cpu"


def test_room_counts_what_the_gangs_earlier_tasks_took_on_the_host() -> None:
    h = host()
    share = Tentative()
    share.take(task(cpu=7), ())
    assert why(task(cpu=1), h, share) is None
    share.take(task(cpu=1), ())
    assert why(task(cpu=1), h, share) == "cpu"


def test_a_task_asking_no_gpu_is_kept_off_gpu_hosts() -> None:
    gpu_host = host(Resources(cpu=8, mem_mb=8000, gpu=2))
    assert gpu_hosts_kept_for_gpu_tasks(task(), gpu_host, gpu_host.free(0), None) == GPU_KEPT
    assert why(task(), gpu_host) == GPU_KEPT
    assert why(task(gpu=1), gpu_host) is None
    assert why(task(gpu=3), gpu_host) == "gpu"
    plain = host()
    assert why(task(), plain) is None
    assert why(task(gpu=1), plain) == "gpu"


def test_a_full_gpu_host_still_keeps_non_gpu_tasks_off() -> None:
    gpu_host = host(Resources(cpu=8, mem_mb=8000, gpu=2), allocated=Resources(gpu=2))
    assert why(task(), gpu_host) == GPU_KEPT


RACK_A = LabelConstraint("HOST", "EQUAL", "rack", "a", 1)
RACK_B = LabelConstraint("HOST", "EQUAL", "rack", "b", 1)


@pytest.mark.parametrize("condition, requirement, passes", [
    ("EQUAL", 1, True), ("EQUAL", 0, False), ("LESS_THAN", 1, False), ("LESS_THAN", 2, True),
    ("GREATER_THAN", 0, True), ("GREATER_THAN", 1, False),
])
def test_host_constraints_count_the_hosts_own_label(condition: str, requirement: int, passes: bool) -> None:
    h = host()  # rack=a
    c = LabelConstraint("HOST", condition, "rack", "a", requirement)
    assert (constraint_holds(task(constraint=c), h, h.free(0), None) is None) is passes


@pytest.mark.parametrize("condition, requirement, passes", [
    ("EQUAL", 2, True), ("EQUAL", 0, False), ("LESS_THAN", 2, False), ("LESS_THAN", 3, True),
    ("GREATER_THAN", 1, True), ("GREATER_THAN", 2, False),
])
def test_task_constraints_count_the_tasks_on_the_host(condition: str, requirement: int, passes: bool) -> None:
    h = host(task_labels={("app", "web"): 1})  # one reported ...
    h.add_pending("p", 10.0, Resources(cpu=1), {"app": "web"})  # ... and one in flight: 2
    c = LabelConstraint("TASK", condition, "app", "web", requirement)
    assert (why(task(constraint=c), h) is None) is passes


def test_task_constraints_count_the_gangs_own_tasks_placed_before() -> None:
    h = host(task_labels={("app", "web"): 1})
    share = Tentative()
    share.take(task(labels={"app": "web"}), ())
    at_most_two = LabelConstraint("TASK", "LESS_THAN", "app", "web", 2)
    assert why(task(constraint=at_most_two), h) is None
    assert why(task(constraint=at_most_two), h, share) == "constraint fewer than 2 tasks app=web"


def test_and_or_constraints_combine_their_parts() -> None:
    h = host(task_labels={("app", "web"): 1})
    no_web = LabelConstraint("TASK", "EQUAL", "app", "web", 0)
    assert why(task(constraint=AndConstraint((RACK_A, no_web))), h) == "constraint (rack=a and no task app=web)"
    assert why(task(constraint=OrConstraint((RACK_A, no_web))), h) is None
    assert why(task(constraint=OrConstraint((RACK_B, no_web))), h) == "constraint (rack=b or no task app=web)"
    assert why(task(constraint=AndConstraint((RACK_A, OrConstraint((RACK_B, RACK_A))))), h) is None


def test_a_refused_constraint_is_named_readably() -> None:
    assert describe_constraint(RACK_A) == "rack=a"
    assert describe_constraint(LabelConstraint("HOST", "EQUAL", "rack", "a", 0)) == "rack!=a"
    assert describe_constraint(LabelConstraint("HOST", "LESS_THAN", "rack", "a", 1)) == "rack!=a"
    assert describe_constraint(LabelConstraint("HOST", "GREATER_THAN", "rack", "a", 0)) == "rack=a"
    assert describe_constraint(LabelConstraint("HOST", "GREATER_THAN", "rack", "a", 3)) == "host label rack=a count > 3"
    assert describe_constraint(LabelConstraint("TASK", "EQUAL", "app", "web", 0)) == "no task app=web"
    assert describe_constraint(LabelConstraint("TASK", "EQUAL", "app", "web", 1)) == "exactly 1 task app=web"
    assert describe_constraint(LabelConstraint("TASK", "LESS_THAN", "app", "web", 2)) == "fewer than 2 tasks app=web"
    assert describe_constraint(LabelConstraint("TASK", "GREATER_THAN", "app", "web", 1)) == "more than 1 task app=web"
    h = HostView("h", 0, BIG, labels={"rack": "b"})
    assert why(task(constraint=RACK_A), h) == "constraint rack=a"


def test_label_counts_add_the_hosts_and_the_gangs() -> None:
    counts = LabelCounts({("app", "web"): 2, ("app", "db"): 1}, {("app", "web"): 1, ("tier", "x"): 1})
    assert counts.get(("app", "web")) == 3
    assert counts.get(("none", "x"), 0) == 0
    assert counts[("tier", "x")] == 1
    assert len(counts) == 3
    with pytest.raises(KeyError):
        counts[("none", "x")]


def test_static_ports_must_be_free_and_in_a_range() -> None:
    h = host(used_ports={31005})
    assert ports_free(task(static_ports=(31004,)), h, h.free(0), None) is None
    assert ports_free(task(static_ports=(31005,)), h, h.free(0), None) == "ports"
    assert ports_free(task(static_ports=(8080,)), h, h.free(0), None) == "ports"  # outside 31000-32000
    assert ports_free(task(static_ports=(8080,)), host(port_ranges=((8000, 8100),)), BIG, None) is None


def test_dynamic_ports_need_enough_free_ports_in_the_ranges() -> None:
    h = host(port_ranges=((100, 104),), used_ports={100, 102})
    assert ports_free(task(dynamic_ports=3), h, h.free(0), None) is None
    assert ports_free(task(dynamic_ports=4), h, h.free(0), None) == "ports"
    assert ports_free(task(dynamic_ports=2, static_ports=(101,)), h, h.free(0), None) is None
    assert ports_free(task(dynamic_ports=3, static_ports=(101,)), h, h.free(0), None) == "ports"


def test_used_ports_outside_the_ranges_do_not_use_up_the_range() -> None:
    h = host(port_ranges=((100, 102),), used_ports={5, 6, 7, 101})
    assert ports_free(task(dynamic_ports=2), h, h.free(0), None) is None
    assert ports_free(task(dynamic_ports=3), h, h.free(0), None) == "ports"


def test_ports_the_gang_took_on_the_host_are_not_free() -> None:
    h = host(port_ranges=((100, 101),))
    share = Tentative()
    share.take(task(), (100,))
    assert ports_free(task(static_ports=(100,)), h, h.free(0), share) == "ports"
    assert ports_free(task(dynamic_ports=1), h, h.free(0), share) is None
    assert ports_free(task(dynamic_ports=2), h, h.free(0), share) == "ports"


def test_checks_run_in_order_and_the_first_refusal_is_the_reason() -> None:
    h = host(Resources(cpu=1, mem_mb=10, gpu=1), state="DOWN", labels={})
    asking = task(cpu=2, constraint=RACK_A, static_ports=(1,), image="debian")
    assert [c(asking, h, h.free(0), None) for c in CHECKS] == [
        NOT_UP, GPU_KEPT, "cpu", "no container runtime", "constraint rack=a", "ports"]
    assert why(asking, h) == NOT_UP


def test_a_task_with_no_constraint_or_ports_skips_those_checks() -> None:
    assert checks_for(task()) == (host_is_up, gpu_hosts_kept_for_gpu_tasks, room_for_resources)
    assert checks_for(task(constraint=RACK_A, dynamic_ports=1, image="debian")) == CHECKS


def test_placing_honours_every_check() -> None:
    hosts = [HostView("down", 0, BIG, state="DOWN"), HostView("gpu", 0, Resources(cpu=8, mem_mb=8000, gpu=1)),
             HostView("small", 0, Resources(cpu=0.5, mem_mb=8000)), HostView("rack-b", 0, BIG, labels={"rack": "b"}),
             HostView("no-ports", 0, BIG, labels={"rack": "a"}, port_ranges=((1, 1),), used_ports={1}),
             HostView("fits", 0, BIG, labels={"rack": "a"})]
    need = TaskNeed("t", Resources(cpu=1, mem_mb=100), RACK_A, dynamic_ports=1)
    assert place_gang([need], hosts, now=0)["t"].host_id == "fits"
    assert place_gang([need], hosts[:-1], now=0) is None


def test_a_task_naming_an_image_goes_only_to_a_host_whose_agent_has_a_runtime() -> None:
    from stages.place.checks import NO_RUNTIME, runs_images

    imaged = task(image="debian:bookworm")
    bare_host, runc_host = host(), host(labels={"hostname": "h", "container.runtime": "runc"})
    assert runs_images(imaged, bare_host, BIG, None) == NO_RUNTIME
    assert runs_images(imaged, runc_host, BIG, None) is None and runs_images(task(), bare_host, BIG, None) is None
    assert runs_images in checks_for(imaged) and runs_images not in checks_for(task())
    assert refusal(imaged, bare_host, BIG, checks=checks_for(imaged)) == NO_RUNTIME
    assert TaskNeed.from_spec({"task_id": "t", "resources": BIG.to_record(), "image": "busybox"}).image == "busybox"
