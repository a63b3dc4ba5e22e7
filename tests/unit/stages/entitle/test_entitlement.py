"""Entitlement calculation (stages/entitle/entitlement.py) against RESOURCE_MANAGER.md: numbers
worked by hand, and the numbers Peloton's own calculator tests assert."""

from __future__ import annotations

import pytest

from peloton.model.resources import EPS, ZERO, Resources
from stages.entitle.entitlement import (
    PoolEntitlement,
    PoolUsage,
    compute_entitlements,
)
from tests.builders.entitlement import FIELD, KINDS, pool, res


def tree(*pools: tuple[str, dict]) -> dict[str, dict]:
    return dict(pools)


def cpu_of(result: dict[str, PoolEntitlement], *paths: str) -> list[float]:
    return [result[p].entitlement.cpu for p in paths]


# ---- hand-worked examples --------------------------------------------------------------------


def user_guide_pools():
    return tree(*(pool(p, cpu=(20, 100, 1), memory=(100, 1000, 1)) for p in ("/a", "/b", "/c")))


def test_user_guide_example():
    pools = user_guide_pools()
    capacity = res(cpu=100, memory=1000)
    usage = {"/a": PoolUsage(demand=res(cpu=10)), "/b": PoolUsage(demand=res(cpu=80)),
             "/c": PoolUsage(demand=res(cpu=80))}
    result = compute_entitlements(pools, usage, capacity)
    assert cpu_of(result, "/a", "/b", "/c") == pytest.approx([10, 45, 45], abs=0.01)

    usage["/a"] = PoolUsage(demand=res(cpu=50))
    result = compute_entitlements(pools, usage, capacity)
    assert cpu_of(result, "/a", "/b", "/c") == pytest.approx([33.33, 33.33, 33.33], abs=0.01)
    # no demand for memory: it all goes out in phase 3, by share, up to each limit
    assert [result[p].entitlement.mem_mb for p in ("/a", "/b", "/c")] == pytest.approx([333.33] * 3, abs=0.01)


def test_root_is_the_capacity():
    result = compute_entitlements(user_guide_pools(), {}, res(cpu=100, memory=1000), res(cpu=7, memory=5))
    root = result["/"]
    assert root.entitlement == res(cpu=100, memory=1000)
    assert root.non_slack_entitlement == root.entitlement
    assert root.slack_entitlement == res(cpu=7)  # slack capacity counts for cpu only
    assert set(result) == {"/", "/a", "/b", "/c"}


def test_unclaimed_capacity_goes_to_pools_without_demand_up_to_their_limit():
    # phase 1: /a 0, /b 30 (and 20 more wanted, its share in totalShare), /c 10; 60 left
    # phase 2: /b gets its 20 (60 offered); 40 left
    # phase 3: 40 by share 1:1:2 -> /a +10, /b +10, /c +20
    pools = tree(pool("/a", cpu=(30, 50, 1)), pool("/b", cpu=(30, 100, 1)), pool("/c", cpu=(20, 100, 2)))
    usage = {"/b": PoolUsage(demand=res(cpu=50)), "/c": PoolUsage(demand=res(cpu=10))}
    result = compute_entitlements(pools, usage, res(cpu=100))
    assert cpu_of(result, "/a", "/b", "/c") == pytest.approx([10, 60, 30])

    # /a's limit of 5 cuts its phase-3 part in half; the other 5 are handed to nobody
    pools = tree(pool("/a", cpu=(3, 5, 1)), pool("/b", cpu=(30, 100, 1)), pool("/c", cpu=(20, 100, 2)))
    result = compute_entitlements(pools, usage, res(cpu=100))
    # phase 1: 0 + 30 + 10, so 60 left; /b takes 20; 40 by 1:1:2, /a capped at 5
    assert cpu_of(result, "/a", "/b", "/c") == pytest.approx([5, 60, 30])
    assert sum(cpu_of(result, "/a", "/b", "/c")) == pytest.approx(95)


def test_static_pool_gets_its_whole_reservation_without_demand():
    usage = {"/busy": PoolUsage(demand=res(cpu=100))}
    elastic = tree(pool("/idle", cpu=(30, 100, 1)), pool("/busy", cpu=(0, 100, 1)))
    result = compute_entitlements(elastic, usage, res(cpu=100))
    assert cpu_of(result, "/idle", "/busy") == pytest.approx([0, 100])

    static = tree(pool("/idle", static=True, cpu=(30, 100, 1)), pool("/busy", cpu=(0, 100, 1)))
    result = compute_entitlements(static, usage, res(cpu=100))
    assert cpu_of(result, "/idle", "/busy") == pytest.approx([30, 70])


def test_nested_tree_splits_the_parent_then_its_children():
    pools = tree(
        pool("/a", cpu=(40, 100, 1)),
        pool("/a/x", cpu=(20, 100, 1)),
        pool("/a/y", cpu=(10, 100, 1)),
        pool("/b", cpu=(20, 100, 1)),
    )
    usage = {"/a/x": PoolUsage(demand=res(cpu=50)), "/a/y": PoolUsage(demand=res(cpu=20)),
             "/b": PoolUsage(demand=res(cpu=10))}
    result = compute_entitlements(pools, usage, res(cpu=100))
    # root: /a wants 70 (its children's), gets 40, then 30 more of the 50 left; /b its 10.
    # Phase 3 hands the last 20 out 1:1: /a to 80, /b to 20.
    assert cpu_of(result, "/a", "/b") == pytest.approx([80, 20])
    # /a's 80: phase 1 20 + 10, 50 left; phase 2 offers 25 each: /x takes 25 (wants 30 more),
    # /y its 10; of the 15 left /x is offered 7.5 (totalShare is still 2) and takes its 5.
    # Phase 3: the last 10 by 1:1.
    assert cpu_of(result, "/a/x", "/a/y") == pytest.approx([55, 25])


def test_repeated_rounds_leave_what_is_under_eps():
    # totalShare 3 stays the divisor after /a is satisfied in round 1, so /b and /c each get a
    # third of what is left, round after round: 70/3 is left after round 1, (70/3)/3^9 after
    # round 10. Round 11 offers /b a third of that; the 2/3 left are under EPS, so the round
    # stops before /c, and the rest is never handed out (phase 3 wants more than EPS).
    pools = tree(*(pool(p, cpu=(0, 100, 1)) for p in ("/a", "/b", "/c")))
    usage = {"/a": PoolUsage(demand=res(cpu=10)), "/b": PoolUsage(demand=res(cpu=50)),
             "/c": PoolUsage(demand=res(cpu=50))}
    result = compute_entitlements(pools, usage, res(cpu=100))
    last = (70 / 3) / 3 ** 9
    assert last > EPS > 2 * last / 3
    c = 100 / 3 + (70 / 3) / 3 * (1 - 3 ** -9) * 3 / 2  # 33.33, then a geometric series
    assert cpu_of(result, "/a", "/b", "/c") == pytest.approx([10, c + last / 3, c], abs=1e-9)
    assert cpu_of(result, "/b", "/c") == pytest.approx([44.9998, 44.9994], abs=1e-4)


def test_allocation_counts_as_demand():
    pools = tree(pool("/a", cpu=(10, 100, 1)), pool("/b", cpu=(10, 100, 1)))
    usage = {"/a": PoolUsage(allocation=res(cpu=30)),  # running, nothing queued
             "/b": PoolUsage(demand=res(cpu=200))}
    result = compute_entitlements(pools, usage, res(cpu=100))
    a, b = cpu_of(result, "/a", "/b")
    assert a == pytest.approx(30)
    assert b == pytest.approx(70, abs=EPS)


def test_slack_entitlement():
    # two pools; 40 slack cpu; /a asks 10 revocable cpu, /b nothing
    pools = tree(pool("/a", cpu=(20, 100, 1), memory=(2000, 4000, 1)),
                 pool("/b", cpu=(20, 100, 1), memory=(2000, 4000, 1)))
    capacity = res(cpu=100, memory=4000)
    usage = {"/a": PoolUsage(demand=res(cpu=5, memory=500), slack_demand=res(cpu=10))}
    result = compute_entitlements(pools, usage, capacity, res(cpu=40))
    a, b = result["/a"], result["/b"]
    # slack cpu: /a gets its 10 (offered 20 by share 1:1), the other 30 go 1:1 in phase 3
    assert a.slack_entitlement.cpu == pytest.approx(25)
    assert b.slack_entitlement.cpu == pytest.approx(15)
    # slack demand of cpu only: the other kinds' slack entitlement is 0, non-slack untouched
    assert (a.slack_entitlement.mem_mb, a.slack_entitlement.disk_mb, a.slack_entitlement.gpu) == (0, 0, 0)
    assert a.non_slack_entitlement == a.entitlement

    # revocable memory: /a's slack need is min(slack limit 20% of 2000, 300) = 300, part of
    # what it needs in phase A (800 in all, the other 3200 then go 1:1 in phase 3: 2400);
    # sa = min(entitlement - (allocation + demand), slack need) = min(1900, 300)
    usage["/a"] = PoolUsage(demand=res(cpu=5, memory=500), slack_demand=res(cpu=10, memory=300))
    result = compute_entitlements(pools, usage, capacity, res(cpu=40))
    a = result["/a"]
    assert a.entitlement.mem_mb == pytest.approx(2400)
    assert a.slack_entitlement.mem_mb == pytest.approx(300)
    assert a.non_slack_entitlement.mem_mb == pytest.approx(2400 - 300)
    assert a.non_slack_entitlement.cpu == a.entitlement.cpu

    # more revocable memory than the slack limit: capped at 20% of the 2000 reserved
    usage["/a"] = PoolUsage(slack_demand=res(cpu=10, memory=900))
    result = compute_entitlements(pools, usage, capacity, res(cpu=40))
    assert result["/a"].slack_entitlement.mem_mb == pytest.approx(400)


def test_share_zero_child_ends_phase_two():
    # Peloton allows share 0 (parse_pool_config refuses it; a record made otherwise may have
    # it). Peloton's loop would never end: /z wants more but is offered 0 each round.
    pools = tree(pool("/z", cpu=(10, 100, 1)), pool("/b", cpu=(10, 100, 1)))
    next(r for r in pools["/z"]["resources"] if r["kind"] == "cpu")["share"] = 0.0
    usage = {"/z": PoolUsage(demand=res(cpu=50)), "/b": PoolUsage(demand=res(cpu=20))}
    result = compute_entitlements(pools, usage, res(cpu=100))
    # /z keeps its reservation only; /b its 20 and, the only share, all of phase 3 (to 90)
    assert cpu_of(result, "/z", "/b") == pytest.approx([10, 90])


def test_usage_rolls_up_and_is_ignored_off_leaves():
    pools = tree(pool("/a", cpu=(0, 100, 1)), pool("/a/x", cpu=(0, 100, 1)), pool("/b", cpu=(0, 100, 1)))
    usage = {"/a": PoolUsage(demand=res(cpu=90)),  # not a leaf: its usage is /a/x's
             "/a/x": PoolUsage(demand=res(cpu=10)), "/nowhere": PoolUsage(demand=res(cpu=90)),
             "/b": PoolUsage(demand=res(cpu=30))}
    result = compute_entitlements(pools, usage, res(cpu=100))
    # 10 and 30 asked; the other 60 evenly in phase 3
    assert cpu_of(result, "/a", "/a/x", "/b") == pytest.approx([40, 40, 60])


def test_deleted_pools_and_broken_trees():
    pools = tree(pool("/a", cpu=(0, 100, 1)), pool("/b", cpu=(0, 100, 1)))
    pools["/b"]["deleted"] = True
    result = compute_entitlements(pools, {}, res(cpu=100))
    assert set(result) == {"/", "/a"}
    assert result["/a"].entitlement.cpu == pytest.approx(100)

    orphan = tree(pool("/a/x", cpu=(0, 100, 1)))
    with pytest.raises(ValueError, match="/a/x: its parent /a is not a pool"):
        compute_entitlements(orphan, {}, res(cpu=100))


def test_pool_usage_allocation_defaults():
    u = PoolUsage(allocation=res(cpu=10), slack_allocation=res(cpu=4))
    assert u.non_slack_allocation == res(cpu=6)
    u = PoolUsage(non_slack_allocation=res(cpu=6), slack_allocation=res(cpu=4))
    assert u.allocation == res(cpu=10)
    u = PoolUsage()
    assert (u.demand, u.slack_demand, u.allocation, u.non_slack_allocation, u.slack_allocation) == (ZERO,) * 5


# ---- Peloton's calculator tests (pkg/resmgr/entitlement/calculator_test.go) -------------------
# Every pool: cpu 10/1000, memory 100/1000, disk 1000/1000, gpu 1/4 (reservation/limit), share 1.
# Cluster: cpu 100, memory 1000, disk 6000, gpu 0; slack cpu 80. Peloton's checks truncate.

PELOTON_CONFIG = {"cpu": (10, 1000, 1), "memory": (100, 1000, 1), "disk": (1000, 1000, 1), "gpu": (1, 4, 1)}
PELOTON_CAPACITY = res(cpu=100, memory=1000, disk=6000, gpu=0)
PELOTON_SLACK = res(cpu=80)


def peloton_tree(static_under_1: bool = False) -> dict[str, dict]:
    return tree(
        pool("/1", **PELOTON_CONFIG), pool("/2", **PELOTON_CONFIG), pool("/3", **PELOTON_CONFIG),
        pool("/1/1", static=static_under_1, **PELOTON_CONFIG),
        pool("/1/2", static=static_under_1, **PELOTON_CONFIG),
        pool("/2/1", **PELOTON_CONFIG), pool("/2/2", **PELOTON_CONFIG),
    )


def truncated(r: Resources) -> dict[str, int]:
    return {k: int(getattr(r, FIELD[k])) for k in KINDS}


def peloton(cpu, gpu, memory, disk) -> dict[str, int]:
    return {"cpu": cpu, "gpu": gpu, "memory": memory, "disk": disk}


def test_peloton_entitlement():
    demand = PoolUsage(demand=res(cpu=20, memory=200, disk=2000))
    usage = {"/1/1": demand}
    result = compute_entitlements(peloton_tree(), usage, PELOTON_CAPACITY, PELOTON_SLACK)
    assert truncated(result["/1/1"].entitlement) == peloton(33, 0, 333, 1000)
    assert truncated(result["/1/2"].entitlement) == peloton(13, 0, 133, 0)

    usage["/2/1"] = demand
    result = compute_entitlements(peloton_tree(), usage, PELOTON_CAPACITY, PELOTON_SLACK)
    assert truncated(result["/1/1"].entitlement) == peloton(30, 0, 300, 1000)
    assert truncated(result["/1/2"].entitlement) == peloton(10, 0, 100, 0)
    assert truncated(result["/2/1"].entitlement) == peloton(30, 0, 300, 1000)

    usage["/2/2"] = demand
    result = compute_entitlements(peloton_tree(), usage, PELOTON_CAPACITY, PELOTON_SLACK)
    assert truncated(result["/1/1"].entitlement) == peloton(26, 0, 266, 1000)
    assert truncated(result["/2/1"].entitlement) == peloton(26, 0, 266, 1000)
    assert truncated(result["/2/2"].entitlement) == peloton(26, 0, 266, 1000)
    assert truncated(result["/2"].entitlement) == peloton(53, 0, 533, 1000)
    assert truncated(result["/3"].entitlement) == peloton(13, 0, 133, 1000)
    assert truncated(result["/1"].entitlement) == peloton(33, 0, 333, 1000)
    assert truncated(result["/"].entitlement) == peloton(100, 0, 1000, 6000)


def test_peloton_entitlement_with_more_demand():
    demand = PoolUsage(demand=res(cpu=40, memory=400, disk=4000))
    usage = {p: demand for p in ("/1/1", "/1/2", "/2/1", "/2/2", "/3")}
    result = compute_entitlements(peloton_tree(), usage, PELOTON_CAPACITY, PELOTON_SLACK)
    for p in ("/1", "/2", "/3"):
        assert truncated(result[p].entitlement) == peloton(33, 0, 333, 1000)
    for p in ("/1/1", "/1/2", "/2/1", "/2/2"):
        assert truncated(result[p].entitlement) == peloton(16, 0, 166, 1000)


def test_peloton_slack_entitlement():
    usage = {
        "/1/1": PoolUsage(slack_demand=res(cpu=20, memory=200, disk=2000)),
        "/2/1": PoolUsage(slack_demand=res(cpu=20, memory=10, disk=50),
                          allocation=res(cpu=5, memory=5, disk=25), slack_allocation=res(cpu=5, memory=5, disk=25)),
        "/3": PoolUsage(slack_demand=res(cpu=20, memory=10, disk=100)),
    }
    result = compute_entitlements(peloton_tree(), usage, PELOTON_CAPACITY, PELOTON_SLACK)
    slack = {p: result[p].slack_entitlement for p in result}
    # capped at the slack limit, 20% of the reservation
    assert (slack["/1/1"].mem_mb, slack["/1/1"].disk_mb) == (pytest.approx(20), pytest.approx(200))
    # capped at slack allocation + slack demand
    assert (slack["/2/1"].mem_mb, slack["/2/1"].disk_mb) == (15, 75)
    assert (slack["/3"].mem_mb, slack["/3"].disk_mb) == (10, 100)
    # 80 revocable cpus
    assert [slack[p].cpu for p in ("/1/1", "/1/2", "/2/1", "/2/2", "/3")] == [22.5, 2.5, 27.5, 2.5, 25]
    # what revocable work gets of memory is not the non-revocable work's
    for p in ("/1/1", "/2/1", "/3"):
        r = result[p]
        assert r.non_slack_entitlement.mem_mb == pytest.approx(r.entitlement.mem_mb - r.slack_entitlement.mem_mb)

    # more slack demand than there is slack cpu
    usage["/1/2"] = PoolUsage(slack_demand=res(cpu=30, memory=20, disk=20))
    result = compute_entitlements(peloton_tree(), usage, PELOTON_CAPACITY, PELOTON_SLACK)
    slack_cpu = {p: result[p].slack_entitlement.cpu for p in result}
    assert int(slack_cpu["/1/1"]) == 17
    assert int(slack_cpu["/1/2"]) == 17
    assert round(slack_cpu["/2/1"]) == 25
    assert slack_cpu["/2/2"] == 0
    assert slack_cpu["/3"] == 20


def test_peloton_zero_slack_entitlement():
    usage = {"/1/1": PoolUsage(non_slack_allocation=res(cpu=100, memory=200, disk=200),
                               demand=res(cpu=10, memory=100, disk=100))}
    result = compute_entitlements(peloton_tree(), usage, PELOTON_CAPACITY, PELOTON_SLACK)
    s = result["/1/1"].slack_entitlement
    assert (s.mem_mb, s.gpu, s.disk_mb) == (0, 0, 0)


def test_peloton_static_pools():
    usage = {"/1/1": PoolUsage(demand=res(cpu=20, memory=200, disk=2000),
                               slack_demand=res(cpu=20, memory=10, disk=100))}
    result = compute_entitlements(peloton_tree(static_under_1=True), usage, PELOTON_CAPACITY, PELOTON_SLACK)
    assert truncated(result["/1/1"].entitlement) == peloton(28, 1, 291, 1000)
    # of 80 revocable cpus, 20 for the demand and 10 of what nobody wants
    assert truncated(result["/1/1"].slack_entitlement) == peloton(30, 0, 10, 0)
