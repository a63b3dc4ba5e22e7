"""Host capacities kept from host-state's changes (peloton/model/host_capacities.py: entitle's
cluster sum, admit's distinct capacities): always what a pass over every host finds."""

from __future__ import annotations

from peloton.model.host_capacities import HostCapacities
from peloton.model.resources import Resources
from stages.admit.checks import distinct_capacities
from stages.entitle.usage import cluster_capacity


def host(cpu: float, state: str = "UP", free: float = 0.0) -> dict:
    return {"state": state, "capacity": {"cpu": cpu, "mem_mb": 10.0 * cpu, "disk_mb": 1.0, "gpu": 0.0},
            "free": {"cpu": free}}


def test_the_sum_follows_capacity_and_state_and_ignores_free_resources() -> None:
    hosts = {f"h{i}": host(8) for i in range(3)}
    kept = HostCapacities()
    kept.update(hosts.items())
    assert kept.up_total(hosts) == cluster_capacity(hosts.values()) == Resources(24, 240, 3, 0)
    steps = [("h0", host(8, free=3)), ("h1", host(8, "DOWN")), ("h2", host(16)), ("h1", host(8))]
    for key, value in steps:
        hosts[key] = value
        kept.update([(key, value)])
        assert kept.up_total(hosts) == cluster_capacity(hosts.values())
    assert kept.up_total(hosts) == Resources(32, 320, 3, 0)


def test_hosts_it_never_heard_change_for_are_counted_all_over_again() -> None:
    kept = HostCapacities()
    hosts = {"a": host(4), "b": host(2)}  # a view read again from the start, say
    assert kept.up_total(hosts) == Resources(6, 60, 2, 0)
    del hosts["b"]
    assert kept.up_total(hosts) == Resources(4, 40, 1, 0)


def test_admit_keeps_the_distinct_host_capacities_as_distinct_capacities_finds_them() -> None:
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
