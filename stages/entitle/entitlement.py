"""Entitlements: how much of the cluster each resource pool may hold, by hierarchical max-min
fairness. Pure: no Kafka, no store, no I/O.

Follows the "Entitlement" section of RESOURCE_MANAGER.md (a reading of Peloton's
pkg/resmgr/entitlement) step for step, quirks included: totalShare is fixed in phase 1, so
children already satisfied keep their share in the divisor and the leftover goes out again in
further rounds until it is below EPS; phase 3 is capped at the limit and what the cap cuts off
is not handed out again; slack (revocable) entitlement is cpu only in its phases 2 and 3.
Where Peloton would divide by zero or loop for ever (children whose share is 0), a share-based
split leaves out those with no share. Siblings are served in path order.

It runs every period over every pool (a thousand and more), so internally pools are numbers and
each quantity is a list of plain floats per kind, kinds in phase-2 order (cpu, gpu, memory,
disk); Resources objects are made only for the result. Phase 2's rounds that change nothing but
the amounts are summed as the geometric series they are (see _skip_rounds): same numbers to
float rounding, without the hundreds of rounds a child with a small share can take.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from operator import add, itemgetter
from typing import Any, NamedTuple

import yaml

from peloton.model.pool import KIND_FIELDS, PoolConfigError, parse_pool_config
from peloton.model.resources import EPS, ZERO, Resources

ROOT = "/"

# Peloton's kind names in the order phase 2 hands them out.
KIND_ORDER = ("cpu", "gpu", "memory", "disk")
_KIND_INDEX = {kind: k for k, kind in enumerate(KIND_ORDER)}
_CPU = _KIND_INDEX["cpu"]
# Rounds are whole: a bound within this much of a whole number of rounds counts as the round
# before, so float error in _skip_rounds' logarithms never skips the round where a child leaves.
_ROUND_MARGIN = 1e-6


@dataclass(slots=True)
class PoolUsage:
    """What a leaf pool asks for and holds. A non-leaf's usage is the sum of its children's.

    Only the non-slack and slack allocations enter the calculation. Give any two of total,
    non-slack and slack: a missing non-slack allocation is total - slack, a missing total is
    non-slack + slack."""

    demand: Resources = ZERO  # queued non-revocable gangs
    slack_demand: Resources = ZERO  # queued revocable gangs
    allocation: Resources | None = None  # total
    non_slack_allocation: Resources | None = None
    slack_allocation: Resources = ZERO

    def __post_init__(self) -> None:
        if self.non_slack_allocation is None:
            total = ZERO if self.allocation is None else self.allocation
            self.non_slack_allocation = total - self.slack_allocation
        if self.allocation is None:
            self.allocation = self.non_slack_allocation + self.slack_allocation


@dataclass(slots=True)
class PoolEntitlement:
    """A pool's share of the cluster. Admission holds non-revocable gangs to
    non_slack_entitlement and revocable ones to slack_entitlement."""

    entitlement: Resources
    non_slack_entitlement: Resources
    slack_entitlement: Resources


# ---- the calculation ----------------------------------------------------------------------


def _tree(pools: dict[str, dict]) -> tuple[list[str], list[dict], list[list[int]]]:
    """Paths, configs and children by index (0 is the root), each pool's children in path
    order. Deleted pools are not in the tree."""
    paths = [ROOT]
    configs: list[dict] = [{}]  # the root's: it has no config, and nothing reads this one
    for path, config in sorted(pools.items()):
        if path != ROOT and not config.get("deleted"):
            paths.append(path)
            configs.append(config)
    index = {path: i for i, path in enumerate(paths)}
    children: list[list[int]] = [[] for _ in paths]
    for i in range(1, len(paths)):
        above = configs[i]["parent"]
        p = index.get(above)
        if p is None:
            raise ValueError(f"pool {paths[i]}: its parent {above} is not a pool")
        children[p].append(i)
    return paths, configs, children


def _top_down(paths: list[str], children: list[list[int]]) -> list[int]:
    """Every pool, each after its parent."""
    order = [0]
    for i in order:  # grows as it goes: a breadth-first walk
        order.extend(children[i])
    if len(order) != len(paths):  # only a config whose parent is its own descendant does this
        lost = sorted(set(paths) - {paths[i] for i in order})
        raise ValueError(f"pools not under the root (a parent loop?): {', '.join(lost)}")
    return order


def _picker(kids: list[int]) -> Callable[[list[float]], tuple[float, ...]]:
    """table -> the kids' entries as a tuple, in one C call."""
    if len(kids) == 1:
        only = kids[0]
        return lambda table: (table[only],)
    return itemgetter(*kids)


def compute_entitlements(pools: dict[str, dict], usage: dict[str, PoolUsage], capacity: Resources,
                         slack_capacity: Resources = ZERO) -> dict[str, PoolEntitlement]:
    """Every pool's entitlement, the root "/" included.

    pools: path -> PoolConfig record (parse_pool_config's), "/" and deleted pools ignored.
    Siblings are served in path order (Peloton's order is its tree's), so every instance that
    computes the same tree gets the same numbers whatever order its pools came in. usage: leaf
    path -> PoolUsage; usage of a path that is not a leaf pool is ignored (a parent's usage is
    its children's). capacity and slack_capacity are the cluster's; only slack cpu is ever
    handed out."""
    paths, configs, children = _tree(pools)
    order = _top_down(paths, children)
    n = len(paths)
    kinds = range(4)
    # Every table below is [kind][pool]: one kind's numbers are one list, read in tight loops.

    reservation = [[0.0] * n for _ in kinds]
    limit = [[0.0] * n for _ in kinds]
    share = [[1.0] * n for _ in kinds]  # a kind a pool does not list: reservation 0, limit 0, share 1
    static = [[False] * n for _ in kinds]
    slack_pct = [0.0] * n
    for i in range(1, n):
        config = configs[i]
        slack_pct[i] = config.get("slack_limit_pct", 20.0)
        for r in config["resources"]:
            k = _KIND_INDEX[r["kind"]]
            reservation[k][i] = r["reservation"]
            limit[k][i] = r["limit"]
            share[k][i] = r["share"]
            static[k][i] = r["static"]

    # Usage: the leaves' as given; a parent's is the sum of its children's, added in order from
    # zero as Peloton adds it (reduce, not sum(): from Python 3.12 sum() compensates rounding).
    demand = [[0.0] * n for _ in kinds]
    slack_demand = [[0.0] * n for _ in kinds]
    non_slack_alloc = [[0.0] * n for _ in kinds]
    slack_alloc = [[0.0] * n for _ in kinds]
    tables = ((demand, "demand"), (slack_demand, "slack_demand"),
              (non_slack_alloc, "non_slack_allocation"), (slack_alloc, "slack_allocation"))
    for i in range(1, n):
        u = usage.get(paths[i])
        if u is not None and not children[i]:
            for table, name in tables:
                r = getattr(u, name)
                if r is not ZERO:  # the tables start at zero
                    table[0][i], table[1][i], table[2][i], table[3][i] = r.cpu, r.gpu, r.mem_mb, r.disk_mb
    bottom_up = [(p, _picker(children[p])) for p in reversed(order) if p and children[p]]
    for table, _ in tables:
        for column in table:
            if not any(column):  # nobody has any: nothing to add up
                continue
            for p, pick in bottom_up:
                column[p] = reduce(add, pick(column), 0.0)

    # What a pool needs for non-revocable work: what it holds of it plus what it asks.
    need = [[a + d for a, d in zip(non_slack_alloc[k], demand[k], strict=True)] for k in kinds]
    # What it needs for revocable work, capped at its slack limit: reservation * slackLimit% / 100
    # for each kind but cpu, the revocable kind itself, whose slack limit is 0.
    zeros = [0.0] * n  # shared by every table that stays all zero; never written to
    slack_need = [zeros] * 4
    for k in kinds:
        if k != _CPU and (any(slack_alloc[k]) or any(slack_demand[k])):
            wanted = [a + d for a, d in zip(slack_alloc[k], slack_demand[k], strict=True)]
            caps = [r * pct / 100.0 for r, pct in zip(reservation[k], slack_pct, strict=True)]
            slack_need[k] = [x if x < cap else cap for x, cap in zip(wanted, caps, strict=True)]

    # Phase A, top down, kind by kind (kinds never mix): each parent's entitlement among its
    # children. The root's is the capacity.
    parents = [p for p in order if children[p]]
    entitlement = [[0.0] * n for _ in kinds]
    for k, amount in enumerate((capacity.cpu, capacity.gpu, capacity.mem_mb, capacity.disk_mb)):
        ent, res, lim, shr, sta = entitlement[k], reservation[k], limit[k], share[k], static[k]
        ask, slack_ask = need[k], slack_need[k]
        ent[0] = float(amount)
        for p in parents:
            kids = children[p]
            e = ent[p]
            total_share = 0.0
            want, got, shares = [], [], []
            for c in kids:
                # Phase 1: the need, capped at the limit, is served up to the reservation now
                # (all of the reservation when STATIC); the rest is phase 2's, by share.
                d = ask[c] + slack_ask[c]
                if d > lim[c]:
                    d = lim[c]
                r = res[c]
                if d > r:
                    a = r
                    total_share += shr[c]
                    d -= r
                else:
                    a = r if sta[c] else d
                    d = 0.0
                e -= a
                if e < EPS:  # Peloton's subtraction: never below 0, and under EPS is 0
                    e = 0.0
                want.append(d)
                got.append(a)
                shares.append(shr[c])
            # Phase 2: the rest, by share, to those who still want some (if anyone does: only
            # a child wanting more than its reservation adds to total_share).
            if total_share > 0:
                e = _share_out(e, total_share, want, shares, got)
            # Phase 3: what nobody wants, by share to all, capped at each one's limit; what the
            # cap cuts off is not handed out again.
            if e > EPS:
                all_shares = reduce(add, shares, 0.0)
                if all_shares > 0:  # else Peloton divides by zero; nobody has a share of it
                    for j, c in enumerate(kids):
                        v = shares[j] * e / all_shares + got[j]
                        got[j] = lim[c] if v > lim[c] else v
            for c, a in zip(kids, got, strict=True):
                ent[c] = a

    # Phase B, first step, each pool on its own: of each non-revocable kind, what its
    # entitlement leaves after its non-revocable need, up to its slack need, is its slack
    # assignment sa (cpu's is 0: its slack need is); its non-slack entitlement is entitlement
    # - sa, every kind clamped, or the entitlement untouched when sa is all 0.
    sa = [zeros] * 4
    for k in kinds:
        if slack_need[k] is not zeros:  # else min(room, 0) is 0 for every pool
            room = [e - x if e - x >= EPS else 0.0 for e, x in zip(entitlement[k], need[k], strict=True)]
            sa[k] = [x if x < cap else cap for x, cap in zip(room, slack_need[k], strict=True)]
    untouched = [not (g or m or d) for g, m, d in zip(sa[1], sa[2], sa[3], strict=True)]
    non_slack = entitlement if all(untouched) else [
        [e if keep else (e - s if e - s >= EPS else 0.0)
         for e, s, keep in zip(entitlement[k], sa[k], untouched, strict=True)]
        for k in kinds]

    # Phase B, slack cpu, top down: a child first gets the slack cpu it holds; the rest of its
    # parent's goes out by share (every child's share counts), then what nobody wants, by
    # share, with no limit. The root's is the cluster's slack cpu.
    held, asks, cpu_share = slack_alloc[_CPU], slack_demand[_CPU], share[_CPU]
    slack_cpu = sa[_CPU] = [0.0] * n
    slack_cpu[0] = float(slack_capacity.cpu)
    for p in parents:
        kids = children[p]
        s = slack_cpu[p]
        for c in kids:
            s -= held[c]
            if s < EPS:
                s = 0.0
        shares = [cpu_share[c] for c in kids]
        total_share = reduce(add, shares, 0.0)
        got = [held[c] for c in kids]
        want = [asks[c] for c in kids]
        if any(want):
            s = _share_out(s, total_share, want, shares, got)
        if s > EPS and total_share > 0:
            for j in range(len(kids)):
                got[j] += shares[j] * s / total_share
        for c, a in zip(kids, got, strict=True):
            slack_cpu[c] = a

    result = {}
    (ec, eg, em, ed), (nc, ng, nm, nd), (sc, sg, sm, sd) = entitlement, non_slack, sa
    for i, path in enumerate(paths):
        # Resources(cpu, mem_mb, disk_mb, gpu); an all-zero one is ZERO, shared (most slack
        # entitlements of the non-revocable kinds are zero, and many pools are idle).
        cpu, gpu, mem, disk = ec[i], eg[i], em[i], ed[i]
        whole = Resources(cpu, mem, disk, gpu) if cpu or gpu or mem or disk else ZERO
        if untouched[i]:
            rest = whole
        else:
            cpu, gpu, mem, disk = nc[i], ng[i], nm[i], nd[i]
            rest = Resources(cpu, mem, disk, gpu) if cpu or gpu or mem or disk else ZERO
        cpu, gpu, mem, disk = sc[i], sg[i], sm[i], sd[i]
        result[path] = PoolEntitlement(whole, rest,
                                       Resources(cpu, mem, disk, gpu) if cpu or gpu or mem or disk else ZERO)
    return result


def _share_out(e: float, total_share: float, want: list[float], shares: list[float],
               got: list[float]) -> float:
    """Phase 2 for one kind: hand `e` out in rounds, to each child that still wants some its
    share/total_share of the round's e (never more than it wants), until nothing is wanted or
    under EPS is left. Updates want and got in place; returns what is left.

    total_share stays as phase 1 fixed it, so children satisfied in an earlier round still
    count in the divisor and each round hands out less than it has: the spec's repeated rounds.
    A child with share 0 would be offered 0 every round (and Peloton's loop would never end
    while it wants more); it is left out, which changes nothing it gets."""
    active = [j for j, d in enumerate(want) if d >= EPS and shares[j] > 0]
    active_share = reduce(add, [shares[j] for j in active], 0.0)
    # The rounds go on while someone wants more than EPS; one wanting exactly EPS still gets
    # its turn in a round but keeps no round going.
    wanting = any(want[j] > EPS for j in active)
    while e > EPS and wanting:
        if active_share < total_share:  # else the coming round hands out all of e
            e = _skip_rounds(e, total_share, active_share, active, want, shares, got)
        rem = e
        changed = False  # someone got all it wants, or now wants EPS or less
        for j in active:
            if rem < EPS:
                break
            d = want[j]
            if d < EPS:
                continue
            v = shares[j] * e / total_share
            if v > d:
                v = d
                want[j] = 0.0
                changed = True
            else:
                want[j] = d = d - v
                if d <= EPS:
                    changed = True
            if rem > v:
                rem -= v
            else:
                v = rem
                rem = 0.0
            got[j] += v
        if rem == e:  # nothing handed out: every further round would be this one again
            break
        e = rem
        if changed:
            active = [j for j in active if want[j] >= EPS]
            active_share = reduce(add, [shares[j] for j in active], 0.0)
            wanting = any(want[j] > EPS for j in active)
    return e


def _skip_rounds(e: float, total_share: float, active_share: float, active: list[int],
                 want: list[float], shares: list[float], got: list[float]) -> float:
    """Go at once through the coming rounds of _share_out in which nothing happens but the
    handing out; returns the e left after them.

    Until a child gets all it wants (or what it still wants falls below EPS) and while e stays
    above EPS, each round gives every active child share/total_share of e and leaves e * q,
    q = 1 - active_share/total_share, so m rounds give it share/active_share * e * (1 - q^m):
    a geometric series. Summed at once it gives the same amounts to float rounding, where round
    by round takes hundreds of rounds when q is close to 1. The round in which something
    happens is left to _share_out."""
    part = active_share / total_share  # of e, handed out each round
    if e - e * part <= EPS:  # the coming round is the last
        return e
    # Per unit of share, what the first child to leave may still get: (want - EPS) / share.
    room = min([(want[j] - EPS) / shares[j] for j in active])
    if room <= e / total_share:  # someone leaves in the coming round
        return e
    log_q = math.log1p(-part)  # log q, precise even when q is all but 1
    rounds = math.log(EPS / e) / log_q  # e * q^rounds = EPS
    filled = room * active_share / e  # 1 - q^rounds when the first child leaves
    if filled < 1.0:
        rounds = min(rounds, math.log1p(-filled) / log_q)
    m = math.floor(rounds - _ROUND_MARGIN)
    if m < 1:
        return e
    given = -math.expm1(m * log_q) * e / active_share  # (1 - q^m) * e / active_share
    for j in active:
        v = shares[j] * given
        got[j] += v
        want[j] -= v
    return e * math.exp(m * log_q)


# ---- dry run: `pelotonctl respool entitlement --input FILE` --------------------------------


class DryRunError(ValueError):
    """The dry-run document is wrong; the message names the place."""


_QUANTITY_KINDS = ", ".join(KIND_ORDER)


def _key(name: Any) -> Any:
    """slack_demand, slackDemand and SLACK_DEMAND are one key."""
    return name.lower().replace("_", "") if isinstance(name, str) else name


def _fields(value: Any, where: str, known: tuple[str, ...]) -> dict[str, Any]:
    """A mapping whose keys are among `known` (spelled as _key spells them)."""
    if not isinstance(value, dict):
        raise DryRunError(f"{where}: expected a mapping, got {type(value).__name__}")
    out = {}
    for name, item in value.items():
        key = _key(name)
        if key not in known:
            raise DryRunError(f"{where}: unknown key {name!r} (known: {', '.join(known)})")
        if key in out:
            raise DryRunError(f"{where}: {name!r} given twice")
        out[key] = item
    return out


def _quantities(value: Any, where: str) -> Resources:
    """{cpu, gpu, memory, disk}: each optional (0), each a finite number >= 0."""
    if value is None:
        return ZERO
    if not isinstance(value, dict):
        raise DryRunError(f"{where}: expected a mapping of {_QUANTITY_KINDS}, got {type(value).__name__}")
    fields = {}
    for name, amount in value.items():
        kind = name.lower() if isinstance(name, str) else name
        if kind not in KIND_FIELDS:
            raise DryRunError(f"{where}: unknown resource kind {name!r} (kinds: {_QUANTITY_KINDS})")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise DryRunError(f"{where}.{kind}: expected a number, got {amount!r}")
        number = float(amount)
        if not math.isfinite(number) or number < 0:
            raise DryRunError(f"{where}.{kind}: expected a finite number >= 0, got {amount!r}")
        fields[KIND_FIELDS[kind]] = number
    return Resources(**fields)


def _usage(value: Any, where: str) -> PoolUsage:
    fields = _fields(value, where, ("demand", "slackdemand", "allocation"))
    alloc = fields.get("allocation")
    parts = {} if alloc is None else _fields(alloc, f"{where}.allocation", ("total", "nonslack", "slack"))
    return PoolUsage(
        demand=_quantities(fields.get("demand"), f"{where}.demand"),
        slack_demand=_quantities(fields.get("slackdemand"), f"{where}.slack_demand"),
        allocation=_quantities(parts["total"], f"{where}.allocation.total") if "total" in parts else None,
        non_slack_allocation=(_quantities(parts["nonslack"], f"{where}.allocation.non_slack")
                              if "nonslack" in parts else None),
        slack_allocation=_quantities(parts.get("slack"), f"{where}.allocation.slack"),
    )


def _record(r: Resources) -> dict[str, float]:
    return {"cpu": r.cpu, "gpu": r.gpu, "memory": r.mem_mb, "disk": r.disk_mb}


def dry_run(doc: dict) -> dict:
    """Entitlements for a tree and usage given in one document (loaded YAML or JSON):

        capacity: {cpu, gpu, memory, disk}
        slack_capacity: {cpu}                       # optional; only cpu is handed out
        pools: [{path: /a, config: {...}}, ...]     # a Peloton pool config each, parents first
        usage: {/a/b: {demand: {...}, slack_demand: {...},
                       allocation: {total: {...}, non_slack: {...}, slack: {...}}}}

    Returns {path: {"entitlement", "non_slack_entitlement", "slack_entitlement"}} for every
    pool and the root "/", sorted by path, each a {cpu, gpu, memory, disk} mapping.
    Raises DryRunError naming the place of the first problem."""
    fields = _fields(doc, "input", ("capacity", "slackcapacity", "pools", "usage"))
    if fields.get("capacity") is None:
        raise DryRunError(f"capacity: missing; expected a mapping of {_QUANTITY_KINDS}")
    capacity = _quantities(fields["capacity"], "capacity")
    slack_capacity = _quantities(fields.get("slackcapacity"), "slack_capacity")

    items = fields.get("pools") or []
    if not isinstance(items, list):
        raise DryRunError(f"pools: expected a list of {{path, config}}, got {type(items).__name__}")
    pools: dict[str, dict] = {}
    for n, item in enumerate(items):
        where = f"pools[{n}]"
        entry = _fields(item, where, ("path", "config"))
        path = entry.get("path")
        if not isinstance(path, str):
            raise DryRunError(f"{where}.path: expected a pool path such as /a/b, got {path!r}")
        where = f"{where} {path}"
        if path == ROOT:
            raise DryRunError(f"{where}: the root pool / is the cluster's capacity; it cannot be listed")
        if path in pools:
            raise DryRunError(f"{where}: pool {path} is listed twice")
        config = entry.get("config")
        if not isinstance(config, dict):
            raise DryRunError(f"{where}.config: expected a pool config mapping, got {type(config).__name__}")
        try:
            record = parse_pool_config(yaml.safe_dump(config), path)
        except PoolConfigError as exc:
            raise DryRunError(f"pool {path}: invalid config:\n" + "\n".join(f"  {e}" for e in exc.errors)) from None
        except yaml.YAMLError as exc:  # a value YAML cannot write (not from a YAML or JSON file)
            raise DryRunError(f"pool {path}: invalid config: {exc}") from None
        if record["parent"] != ROOT and record["parent"] not in pools:
            raise DryRunError(f"{where}: its parent {record['parent']} is not listed before it")
        pools[path] = record

    raw_usage = fields.get("usage") or {}
    if not isinstance(raw_usage, dict):
        raise DryRunError(f"usage: expected a mapping of leaf pool path to usage, got {type(raw_usage).__name__}")
    parents = {record["parent"] for record in pools.values()}
    usage = {}
    for path, value in raw_usage.items():
        if path not in pools:
            raise DryRunError(f"usage {path}: no such pool (pools: {', '.join(pools) or 'none'})")
        if path in parents:
            raise DryRunError(f"usage {path}: not a leaf pool; a parent's usage is the sum of its children's")
        usage[path] = _usage(value, f"usage {path}")

    result = compute_entitlements(pools, usage, capacity, slack_capacity)
    return {
        path: {
            "entitlement": _record(pool.entitlement),
            "non_slack_entitlement": _record(pool.non_slack_entitlement),
            "slack_entitlement": _record(pool.slack_entitlement),
        }
        for path, pool in sorted(result.items())
    }


# ---- benchmark ----------------------------------------------------------------------------


class BenchmarkTree(NamedTuple):
    pools: dict[str, dict]
    usage: dict[str, PoolUsage]
    capacity: Resources
    slack_capacity: Resources


def _spread(i: int) -> float:
    """A deterministic value in [0, 1) for pool number i (Knuth's multiplicative hash)."""
    return ((i * 2654435761) % 4294967296) / 4294967296


def benchmark_tree(levels: int = 3, fanout: int = 10) -> BenchmarkTree:
    """A synthetic tree, fanout children per pool over `levels` levels (10 x 10 x 10 by
    default: 1,110 pools, 1,000 leaves), and leaf usage that asks for more than the cluster
    holds, so phase 2 runs its repeated rounds. The same tree every call."""
    capacity = Resources(cpu=12_000.0, mem_mb=48_000_000.0, disk_mb=240_000_000.0, gpu=96.0)
    slack_capacity = Resources(cpu=2_400.0)
    top = {"cpu": capacity.cpu, "gpu": capacity.gpu, "memory": capacity.mem_mb, "disk": capacity.disk_mb}
    pools: dict[str, dict] = {}
    usage: dict[str, PoolUsage] = {}
    number = 0
    frontier = [(ROOT, top, top)]  # (path, reservation, limit) by Peloton kind
    for level in range(levels):
        below = []
        for path, res, lim in frontier:
            for child in range(fanout):
                number += 1
                h = _spread(number)
                name = f"p{child}"
                child_path = f"/{name}" if path == ROOT else f"{path}/{name}"
                child_res = {k: v * 0.8 / fanout for k, v in res.items()}  # siblings fit their parent
                child_lim = {k: v * 0.6 for k, v in lim.items()}
                pools[child_path] = {
                    "path": child_path, "name": name, "parent": path, "owning_team": "", "ldap_groups": [],
                    "resources": [
                        {"kind": kind, "reservation": child_res[kind], "limit": child_lim[kind],
                         "share": 1.0 + number % 3, "static": number % 7 == 0}
                        for kind in KIND_FIELDS
                    ],
                    "policy": 1, "controller_limit_pct": 100.0, "slack_limit_pct": 20.0,
                    "deleted": False, "updated_ms": 0,
                }
                below.append((child_path, child_res, child_lim))
                if level == levels - 1:
                    cpu = child_res["cpu"]
                    wants = 0.0 if h < 0.2 else 3.0 * h  # a fifth ask nothing, the rest up to 3x
                    holds = 1.5 * _spread(number + 7919)
                    usage[child_path] = PoolUsage(
                        demand=_per_cpu(cpu * wants, with_gpu=number % 5 == 0),
                        slack_demand=_per_cpu(cpu * h, with_gpu=False) if number % 4 == 0 else ZERO,
                        allocation=_per_cpu(cpu * holds, with_gpu=number % 5 == 0),
                    )
        frontier = below
    return BenchmarkTree(pools, usage, capacity, slack_capacity)


def _per_cpu(cpu: float, with_gpu: bool) -> Resources:
    """A task mix's resources for `cpu` cores: 4 GB memory and 20 GB disk a core."""
    return Resources(cpu=cpu, mem_mb=4000 * cpu, disk_mb=20_000 * cpu, gpu=cpu / 100 if with_gpu else 0.0)


def time_entitlement(pools: dict[str, dict], usage: dict[str, PoolUsage], capacity: Resources,
                     repeat: int = 20, *, slack_capacity: Resources = ZERO) -> float:
    """The median time of compute_entitlements over `repeat` runs, in milliseconds."""
    compute_entitlements(pools, usage, capacity, slack_capacity)  # warm-up: not timed
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        compute_entitlements(pools, usage, capacity, slack_capacity)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)
