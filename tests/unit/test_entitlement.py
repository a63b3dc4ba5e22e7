"""Entitlement calculation (stages/entitle/entitlement.py) against RESOURCE_MANAGER.md: numbers
worked by hand, the numbers Peloton's own calculator tests assert, and a round-by-round
transcription of the spec on random trees."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from peloton.model.pool import parse_pool_config
from peloton.model.resources import EPS, ZERO, Resources
from stages.entitle.entitlement import (
    DryRunError,
    PoolEntitlement,
    PoolUsage,
    benchmark_tree,
    compute_entitlements,
    dry_run,
    time_entitlement,
)

KINDS = ("cpu", "gpu", "memory", "disk")
FIELD = {"cpu": "cpu", "gpu": "gpu", "memory": "mem_mb", "disk": "disk_mb"}


def pool(path: str, slack_pct: float | None = None, static: bool = False, **kinds) -> tuple[str, dict]:
    """A pool record as parse_pool_config makes it; each kind given as (reservation, limit, share)."""
    config: dict = {"resources": [
        {"kind": kind, "reservation": r, "limit": limit, "share": share, **({"type": 2} if static else {})}
        for kind, (r, limit, share) in kinds.items()
    ]}
    if slack_pct is not None:
        config["slackLimit"] = {"maxPercent": slack_pct}
    return path, parse_pool_config(yaml.safe_dump(config), path)


def tree(*pools: tuple[str, dict]) -> dict[str, dict]:
    return dict(pools)


def cpu_of(result: dict[str, PoolEntitlement], *paths: str) -> list[float]:
    return [result[p].entitlement.cpu for p in paths]


def res(cpu=0.0, memory=0.0, disk=0.0, gpu=0.0) -> Resources:
    return Resources(cpu=cpu, mem_mb=memory, disk_mb=disk, gpu=gpu)


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


# ---- against the spec, transcribed round by round ---------------------------------------------


def spec_entitlements(pools, usage, capacity, slack_capacity):
    """RESOURCE_MANAGER.md's Entitlement section, step by step, with a dict per resource vector
    and every round of phase 2 gone through: slow, plain, independent of the module's layout."""
    kids: dict[str, list[str]] = {"/": []}
    for path, config in sorted(pools.items()):  # siblings in path order
        kids.setdefault(path, [])
        kids[config["parent"]].append(path)
    conf = {path: {r["kind"]: r for r in config["resources"]} for path, config in pools.items()}

    def vec(r):
        return {k: getattr(r, FIELD[k]) for k in KINDS}

    def minus(a, b):
        return {k: 0.0 if a[k] < b[k] else (a[k] - b[k] if a[k] - b[k] >= EPS else 0.0) for k in KINDS}

    zero = dict.fromkeys(KINDS, 0.0)

    def rolled(path, name):
        if not kids[path]:
            return vec(getattr(usage[path], name)) if path in usage else dict(zero)
        total = dict(zero)
        for child in kids[path]:
            part = rolled(child, name)
            total = {k: total[k] + part[k] for k in KINDS}
        return total

    u = {name: {p: rolled(p, name) for p in pools}
         for name in ("demand", "slack_demand", "non_slack_allocation", "slack_allocation")}
    non_slack_req = {p: {k: u["non_slack_allocation"][p][k] + u["demand"][p][k] for k in KINDS} for p in pools}
    slack_limit = {p: {k: 0.0 if k == "cpu" else conf[p][k]["reservation"] * pools[p]["slack_limit_pct"] / 100
                       for k in KINDS} for p in pools}
    slack_req = {p: {k: min(slack_limit[p][k], u["slack_allocation"][p][k] + u["slack_demand"][p][k])
                     for k in KINDS} for p in pools}

    def phase2(E, T, D, A, children, kinds, share):
        for k in kinds:
            while E[k] > EPS and any(D[n][k] > EPS for n in children):
                rem = E[k]
                for n in children:
                    if rem < EPS:
                        break
                    if D[n][k] < EPS:
                        continue
                    v = share(n, k) * E[k] / T[k]
                    if v > D[n][k]:
                        v = D[n][k]
                        D[n][k] = 0.0
                    else:
                        D[n][k] -= v
                    if rem > v:
                        rem -= v
                    else:
                        v = rem
                        rem = 0.0
                    A[n][k] += v
                E[k] = rem

    ent = {"/": vec(capacity)}
    non_slack = {"/": vec(capacity)}
    slack = {"/": {**zero, "cpu": slack_capacity.cpu}}

    def split(parent):
        children = kids[parent]
        if not children:
            return
        E, T, D, A = dict(ent[parent]), dict(zero), {}, {}
        for n in children:
            d = {k: min(non_slack_req[n][k] + slack_req[n][k], conf[n][k]["limit"]) for k in KINDS}
            a = {}
            for k in KINDS:
                c = conf[n][k]
                a[k] = c["reservation"] if c["static"] else min(d[k], c["reservation"])
                if d[k] > c["reservation"]:
                    T[k] += c["share"]
                    d[k] -= c["reservation"]
                else:
                    d[k] = 0.0
            E = minus(E, a)
            D[n], A[n] = d, a
        phase2(E, T, D, A, children, KINDS, lambda n, k: conf[n][k]["share"])
        for k in KINDS:
            if E[k] > EPS:
                total = sum(conf[n][k]["share"] for n in children)
                for n in children:
                    A[n][k] = min(conf[n][k]["share"] * E[k] / total + A[n][k], conf[n][k]["limit"])
        for n in children:
            ent[n] = A[n]
        # phase B
        S, T, SD, SA = dict(slack[parent]), dict(zero), {}, {}
        for n in children:
            SD[n] = {**zero, "cpu": u["slack_demand"][n]["cpu"]}
            T["cpu"] += conf[n]["cpu"]["share"]
            room = minus(ent[n], non_slack_req[n])
            sa = {k: min(room[k], slack_req[n][k]) for k in KINDS}
            non_slack[n] = ent[n] if all(v == 0 for v in sa.values()) else minus(ent[n], sa)
            sa["cpu"] = u["slack_allocation"][n]["cpu"]
            S = minus(S, sa)
            SA[n] = sa
        phase2(S, T, SD, SA, children, ("cpu",), lambda n, k: conf[n][k]["share"])
        if S["cpu"] > EPS:
            for n in children:
                SA[n]["cpu"] += conf[n]["cpu"]["share"] * S["cpu"] / T["cpu"]
        for n in children:
            slack[n] = SA[n]
            split(n)

    split("/")
    return {p: (ent[p], non_slack[p], slack[p]) for p in ent}


def random_case(seed: int):
    rng = random.Random(seed)
    capacity = res(cpu=rng.choice([50, 100, 400]), memory=rng.choice([1000, 8000]),
                   disk=rng.choice([0, 5000]), gpu=rng.choice([0, 4]))
    top = {k: getattr(capacity, FIELD[k]) for k in KINDS}
    pools: dict[str, dict] = {}
    usage: dict[str, PoolUsage] = {}

    def grow(path, reservation, limit, depth):
        n = rng.randint(1, 4)
        for i in range(n):
            child = f"{path.rstrip('/')}/p{i}"
            r = {k: reservation[k] * rng.uniform(0, 1.0 / n) for k in KINDS}
            lim = {k: max(r[k], limit[k] * rng.choice([0.3, 0.7, 1.0])) for k in KINDS}
            kinds = {k: (r[k], lim[k], rng.choice([0.5, 1, 1, 2, 3])) for k in KINDS}
            pools.update([pool(child, slack_pct=rng.choice([None, 0, 50]), static=rng.random() < 0.15, **kinds)])
            if depth < 3 and rng.random() < 0.6:
                grow(child, r, lim, depth + 1)
            else:
                def some(scale):
                    return res(**{k: (0.0 if rng.random() < 0.3 else rng.uniform(0, scale * top[k])) for k in KINDS})
                slack_alloc = some(0.02)
                usage[child] = PoolUsage(demand=some(0.3), slack_demand=some(0.1),
                                         non_slack_allocation=some(0.1), slack_allocation=slack_alloc)

    grow("/", top, top, 1)
    slack_capacity = res(cpu=rng.choice([0, 20, 80]))
    return pools, usage, capacity, slack_capacity


def assert_same(result, expected):
    assert set(result) == set(expected)
    for path, vectors in expected.items():
        got = result[path]
        ours = (got.entitlement, got.non_slack_entitlement, got.slack_entitlement)
        for mine, theirs in zip(ours, vectors, strict=True):
            for k in KINDS:
                assert getattr(mine, FIELD[k]) == pytest.approx(theirs[k], rel=1e-9, abs=1e-9), (path, k)


@pytest.mark.parametrize("seed", range(40))
def test_matches_the_spec_round_by_round(seed):
    pools, usage, capacity, slack_capacity = random_case(seed)
    assert_same(compute_entitlements(pools, usage, capacity, slack_capacity),
                spec_entitlements(pools, usage, capacity, slack_capacity))


def test_same_numbers_whatever_the_order_of_pools():
    t = benchmark_tree(levels=2, fanout=12)  # /p0, /p1, /p10, ... in path order
    shuffled = list(t.pools.items())
    random.Random(1).shuffle(shuffled)
    assert compute_entitlements(dict(shuffled), t.usage, t.capacity, t.slack_capacity) == \
        compute_entitlements(t.pools, t.usage, t.capacity, t.slack_capacity)
    assert_same(compute_entitlements(dict(shuffled), t.usage, t.capacity, t.slack_capacity),
                spec_entitlements(t.pools, t.usage, t.capacity, t.slack_capacity))


def test_matches_the_spec_on_the_benchmark_tree():
    t = benchmark_tree(levels=3, fanout=10)
    assert_same(compute_entitlements(t.pools, t.usage, t.capacity, t.slack_capacity),
                spec_entitlements(t.pools, t.usage, t.capacity, t.slack_capacity))


# ---- a thousand pools ---------------------------------------------------------------------------


def test_thousand_pools():
    t = benchmark_tree()
    assert len(t.pools) == 1110 and len(t.usage) == 1000
    assert set(next(iter(t.pools.values()))) == set(parse_pool_config("{}", "/x"))  # a real record
    result = compute_entitlements(t.pools, t.usage, t.capacity, t.slack_capacity)
    assert set(result) == set(t.pools) | {"/"}
    children: dict[str, list[str]] = {}
    for path, config in t.pools.items():
        children.setdefault(config["parent"], []).append(path)
        for r in config["resources"]:
            assert getattr(result[path].entitlement, FIELD[r["kind"]]) <= r["limit"] + EPS, path
    for parent, kids in children.items():
        for k in KINDS:
            total = sum(getattr(result[c].entitlement, FIELD[k]) for c in kids)
            assert total <= getattr(result[parent].entitlement, FIELD[k]) + EPS, (parent, k)
        assert sum(result[c].slack_entitlement.cpu for c in kids) <= result[parent].slack_entitlement.cpu + EPS
    assert time_entitlement(t.pools, t.usage, t.capacity, repeat=2, slack_capacity=t.slack_capacity) > 0


# ---- dry run ----------------------------------------------------------------------------------

DRY_RUN = """
capacity: {cpu: 100, memory: 100000, disk: 100000, gpu: 0}
pools:
  - path: /team
    config:                       # camelCase, as in Peloton's respool files
      name: team
      owningTeam: infra
      resources:
        - {kind: cpu, reservation: 40, limit: 80, share: 2}
        - {kind: memory, reservation: 40000, limit: 80000, share: 1}
      slackLimit: {maxPercent: 10}
      controllerLimit: {maxPercent: 50}
  - path: /team/batch
    config:
      resources:
        - {kind: cpu, reservation: 10, limit: 80, share: 1}
        - {kind: memory, reservation: 10000, limit: 80000, share: 1}
  - path: /team/web
    config:
      resources:
        - {kind: cpu, reservation: 20, limit: 40, share: 1, type: 2}
        - {kind: memory, reservation: 20000, limit: 40000, share: 1, type: 2}
usage:
  /default: {demand: {cpu: 20, memory: 1000}}
  /team/batch: {demand: {cpu: 70, memory: 30000}}
"""


def dry_run_doc(peloton_examples: Path) -> dict:
    doc = yaml.safe_load(DRY_RUN)
    default = yaml.safe_load((peloton_examples / "default_respool.yaml").read_text())
    doc["pools"].insert(0, {"path": "/default", "config": default})
    return doc


def test_dry_run(peloton_examples):
    out = dry_run(dry_run_doc(peloton_examples))
    assert list(out) == ["/", "/default", "/team", "/team/batch", "/team/web"]
    assert out["/"]["entitlement"] == {"cpu": 100, "gpu": 0, "memory": 100000, "disk": 100000}
    for shares in out.values():
        assert set(shares) == {"entitlement", "non_slack_entitlement", "slack_entitlement"}
        for r in shares.values():
            assert list(r) == ["cpu", "gpu", "memory", "disk"]

    def ent(path):
        return out[path]["entitlement"]

    # root: /default asks 20 cpu, capped at its limit 12 (= reservation); /team asks 70, 40
    # reserved; 48 left, /team takes its 30; phase 3 offers 6 and 12 of the last 18, both capped
    assert ent("/default") == pytest.approx({"cpu": 12, "gpu": 0, "memory": 6144, "disk": 20480})
    assert ent("/team") == pytest.approx({"cpu": 80, "gpu": 0, "memory": 64500, "disk": 0})
    # /team's 80: /web is STATIC (20 without demand), /batch 10 reserved + all 50 left
    assert ent("/team/batch") == pytest.approx({"cpu": 60, "gpu": 0, "memory": 37250, "disk": 0})
    assert ent("/team/web") == pytest.approx({"cpu": 20, "gpu": 0, "memory": 27250, "disk": 0})
    assert out["/team/batch"]["non_slack_entitlement"] == ent("/team/batch")
    assert out["/team/batch"]["slack_entitlement"] == {"cpu": 0, "gpu": 0, "memory": 0, "disk": 0}


def test_dry_run_usage_parts(peloton_examples):
    doc = dry_run_doc(peloton_examples)
    doc["slack_capacity"] = {"cpu": 8}
    doc["usage"]["/team/web"] = {"slack_demand": {"cpu": 3},
                                 "allocation": {"total": {"cpu": 5}, "slack": {"cpu": 1}}}
    out = dry_run(doc)
    assert out["/"]["slack_entitlement"] == {"cpu": 8, "gpu": 0, "memory": 0, "disk": 0}
    # /web holds 1 revocable cpu (its non-slack allocation is the other 4) and asks 3 more:
    # it keeps the 1 and gets the 3; what nobody asks for is spread by share, and all 8 of the
    # root's go to its children
    assert out["/team/web"]["slack_entitlement"]["cpu"] >= 4 - EPS
    assert sum(out[p]["slack_entitlement"]["cpu"] for p in ("/default", "/team")) == pytest.approx(8)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("capacity"), "capacity: missing"),
    (lambda d: d.update(capacity=[100]), "capacity: expected a mapping"),
    (lambda d: d["capacity"].update(cpu=-1), "capacity.cpu: expected a finite number >= 0, got -1"),
    (lambda d: d["capacity"].update(cpu="lots"), "capacity.cpu: expected a number, got 'lots'"),
    (lambda d: d["capacity"].update(cpu=True), "capacity.cpu: expected a number, got True"),
    (lambda d: d["capacity"].update(cores=4), "capacity: unknown resource kind 'cores'"),
    (lambda d: d.update(slack_capacity={"cpu": float("nan")}), "slack_capacity.cpu: expected a finite number"),
    (lambda d: d["pools"].reverse(), "pools[0] /team/web: its parent /team is not listed before it"),
    (lambda d: d["pools"].append({"path": "/team", "config": {}}), "pools[4] /team: pool /team is listed twice"),
    (lambda d: d["pools"].append({"path": "/", "config": {}}), "the root pool / is the cluster's capacity"),
    (lambda d: d["pools"].append({"path": "/x"}), "pools[4] /x.config: expected a pool config mapping"),
    (lambda d: d["pools"].append({"path": "/x", "config": {}, "parent": "/"}), "pools[4]: unknown key 'parent'"),
    (lambda d: d["pools"][1]["config"]["resources"][0].update(limit=1),
     "pool /team: invalid config:\n  resources[0]: limit 1.0 is below reservation 40.0"),
    (lambda d: d["usage"].update({"/nowhere": {}}), "usage /nowhere: no such pool"),
    (lambda d: d["usage"].update({"/team": {}}), "usage /team: not a leaf pool"),
    (lambda d: d["usage"]["/team/batch"].update(demand={"cpu": -3}),
     "usage /team/batch.demand.cpu: expected a finite number >= 0, got -3"),
    (lambda d: d["usage"]["/team/batch"].update(demand={"mem": 3}),
     "usage /team/batch.demand: unknown resource kind 'mem'"),
    (lambda d: d["usage"]["/team/batch"].update(allocation={"used": {}}),
     "usage /team/batch.allocation: unknown key 'used'"),
    (lambda d: d.update(extra=1), "input: unknown key 'extra'"),
])
def test_dry_run_errors(peloton_examples, change, message):
    doc = dry_run_doc(peloton_examples)
    change(doc)
    with pytest.raises(DryRunError) as caught:
        dry_run(doc)
    assert message in str(caught.value)


def test_dry_run_accepts_camel_case_keys(peloton_examples):
    doc = dry_run_doc(peloton_examples)
    doc["slackCapacity"] = {"CPU": 8}
    doc["usage"]["/team/web"] = {"slackDemand": {"cpu": 3}, "allocation": {"nonSlack": {"memory": 5}}}
    out = dry_run(doc)
    assert out["/"]["slack_entitlement"]["cpu"] == 8
