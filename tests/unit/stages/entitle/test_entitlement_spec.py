"""Entitlement calculation against a round-by-round transcription of RESOURCE_MANAGER.md's spec, on
random trees, the benchmark tree and a thousand pools."""

from __future__ import annotations

import random

import pytest

from peloton.model.pool import parse_pool_config
from peloton.model.resources import EPS
from stages.entitle.entitlement import (
    PoolUsage,
    benchmark_tree,
    compute_entitlements,
    time_entitlement,
)
from tests.builders.entitlement import FIELD, KINDS, pool, res

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
