"""Why a gang is pending: hosts counted per reason, as the user reads it."""

from __future__ import annotations

from peloton.model.constraint import LabelConstraint
from peloton.model.resources import Resources
from stages.place.host_view import HostView
from stages.place.placement import HostRing, explain, refusal_counts
from stages.place.task_need import TaskNeed

RACK_A = LabelConstraint("HOST", "EQUAL", "rack", "a", 1)


def host(name: str, cpu: float = 8, rack: str = "a", **fields) -> HostView:
    return HostView(name, 0, Resources(cpu=cpu, mem_mb=1000), labels={"hostname": name, "rack": rack}, **fields)


def task(task_id: str, cpu: float = 1, **fields) -> TaskNeed:
    return TaskNeed(task_id, Resources(cpu=cpu, mem_mb=10), **fields)


def test_hosts_are_counted_once_each_under_the_first_reason_that_refuses() -> None:
    hosts = [host("a", cpu=1), host("b", rack="b"), host("c", rack="b", cpu=1), host("d", state="DOWN"),
             host("e")]
    assert refusal_counts(task("t", cpu=2, constraint=RACK_A), hosts, now=0) == {
        "cpu": 2, "constraint rack=a": 1, "not UP": 1}


def test_a_task_that_fits_nowhere_is_explained_with_counts_largest_first() -> None:
    hosts = [host(f"h{i}", cpu=2) for i in range(9_812)] + [host(f"r{i}", rack="b") for i in range(188)]
    why = explain([task("j-0-1", cpu=4, constraint=RACK_A)], HostRing(hosts), now=0)
    assert why == "task j-0-1 fits on none of 10,000 hosts: no room for 4 cpu on 9,812; constraint rack=a on 188"


def test_every_reason_reads_as_the_user_would_say_it() -> None:
    def with_room(name: str, cpu: float = 8, mem_mb: float = 1000, disk_mb: float = 1000, gpu: float = 0,
                  **fields) -> HostView:
        return HostView(name, 0, Resources(cpu=cpu, mem_mb=mem_mb, disk_mb=disk_mb, gpu=gpu), **fields)

    hosts = [with_room("cpu", cpu=1), with_room("mem", mem_mb=5), with_room("disk", disk_mb=0),
             with_room("gpu", gpu=1), with_room("down", state="DRAINING"), with_room("ports", port_ranges=((1, 1),))]
    asking = TaskNeed("t", Resources(cpu=2, mem_mb=10, disk_mb=1), static_ports=(31000,), dynamic_ports=1)
    assert explain([asking], hosts, now=0) == (
        "task t fits on none of 6 hosts: GPU host kept for GPU tasks on 1; no room for 2 cpu on 1; "
        "no room for 1 MB of disk on 1; no room for 10 MB of memory on 1; not UP on 1; "
        "no free ports for 31000, 1 dynamic on 1")
    gpu_task = TaskNeed("g", Resources(cpu=1, gpu=2))
    why = explain([gpu_task], [with_room("gpu", gpu=1)], now=0)
    assert why == "task g fits on none of 1 host: no room for 2 gpu on 1"


def test_a_gang_whose_tasks_fit_alone_but_not_together() -> None:
    why = explain([task("t1", cpu=5), task("t2", cpu=5)], [host("a"), host("b", cpu=4)], now=0)
    assert why == "the gang's 2 tasks do not fit together on the room the hosts have free now"


def test_the_first_task_that_fits_nowhere_is_the_one_explained() -> None:
    why = explain([task("t1"), task("t2", cpu=16)], [host("a")], now=0)
    assert why == "task t2 fits on none of 1 host: no room for 16 cpu on 1"


def test_explain_counts_pending_placements_and_knows_when_there_are_no_hosts() -> None:
    h = host("a", cpu=2)
    h.add_pending("p", 10.0, Resources(cpu=2))
    assert explain([task("t")], [h], now=0) == "task t fits on none of 1 host: no room for 1 cpu on 1"
    assert explain([task("t")], [], now=0) == "no hosts are known yet"
    assert explain([task("t")], HostRing(), now=0) == "no hosts are known yet"
