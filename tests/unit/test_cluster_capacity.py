"""Host capacities kept from host-state's changes (entitle's cluster sum, admit's distinct capacities):
always what a pass over every host finds."""

from __future__ import annotations

from peloton.model.resources import Resources
from stages.entitle.usage import ClusterCapacity, cluster_capacity


def host(cpu: float, state: str = "UP", free: float = 0.0) -> dict:
    return {"state": state, "capacity": {"cpu": cpu, "mem_mb": 10.0 * cpu, "disk_mb": 1.0, "gpu": 0.0},
            "free": {"cpu": free}}


def test_the_sum_follows_capacity_and_state_and_ignores_free_resources() -> None:
    hosts = {f"h{i}": host(8) for i in range(3)}
    kept = ClusterCapacity()
    kept.update(hosts.items())
    assert kept.total(hosts) == cluster_capacity(hosts.values()) == Resources(24, 240, 3, 0)
    steps = [("h0", host(8, free=3)), ("h1", host(8, "DOWN")), ("h2", host(16)), ("h1", host(8))]
    for key, value in steps:
        hosts[key] = value
        kept.update([(key, value)])
        assert kept.total(hosts) == cluster_capacity(hosts.values())
    assert kept.total(hosts) == Resources(32, 320, 3, 0)


def test_hosts_it_never_heard_change_for_are_counted_all_over_again() -> None:
    kept = ClusterCapacity()
    hosts = {"a": host(4), "b": host(2)}  # a view read again from the start, say
    assert kept.total(hosts) == Resources(6, 60, 2, 0)
    del hosts["b"]
    assert kept.total(hosts) == Resources(4, 40, 1, 0)


def test_admit_keeps_the_distinct_host_capacities_as_distinct_capacities_finds_them() -> None:
    from stages.admit.checks import HostCapacities, distinct_capacities

    hosts = {"a": host(8), "b": host(8), "c": host(16)}
    kept = HostCapacities()
    kept.update(hosts.items())
    for key, value in [("a", host(8, free=1)), ("c", host(8)), ("b", host(32, "DOWN")), ("d", host(4))]:
        hosts[key] = value
        kept.update([(key, value)])
        assert sorted(kept.distinct(hosts), key=lambda r: r.cpu) == sorted(distinct_capacities(hosts.values()),
                                                                           key=lambda r: r.cpu)
    assert {r.cpu for r in kept.distinct(hosts)} == {4, 8, 32}
    assert {r.cpu for r in HostCapacities().distinct({"x": host(2)})} == {2}  # a view read anew
