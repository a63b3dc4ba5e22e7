"""The inputs of the entitlement calculation as the running system carries them: each pool's
usage from its PoolEntitlement record, the root's capacity from host state. Pure functions,
shared by the entitle stage and `pelotonctl respool get` so both compute the same tree."""

from __future__ import annotations

from collections.abc import Iterable

from peloton.model.host_capacities import lent_by
from peloton.model.pool import KIND_FIELDS
from peloton.model.resources import ZERO, Resources
from stages.entitle.admission import PoolLedger, PoolQueue, over_allocation
from stages.entitle.entitlement import PoolUsage, compute_entitlements

# Our Resources fields -> Peloton's kind names, for what people read.
KIND_NAMES = {field: kind for kind, field in KIND_FIELDS.items()}


def usage_from_record(rec: dict) -> PoolUsage:
    """A pool's usage as its owner published it (PoolEntitlement)."""
    r = Resources.from_record
    return PoolUsage(demand=r(rec["demand"]), slack_demand=r(rec["slack_demand"]), allocation=r(rec["allocation"]),
                     non_slack_allocation=r(rec["non_slack_allocation"]), slack_allocation=r(rec["slack_allocation"]))


def cluster_capacity(host_states: Iterable[dict]) -> Resources:
    """The root's capacity: the sum of the UP hosts."""
    cpu = mem = disk = gpu = 0.0
    for h in host_states:
        if h.get("state", "UP") == "UP":
            c = h["capacity"]
            cpu, mem, disk, gpu = cpu + c["cpu"], mem + c["mem_mb"], disk + c["disk_mb"], gpu + c["gpu"]
    return Resources(cpu, mem, disk, gpu)


def slack_capacity(capacity: Resources, usage: Iterable[PoolUsage], lent: float = 0.0) -> Resources:
    """Slack (revocable) capacity: the cpu no pool holds for non-revocable runs, and the cpu they
    hold but do not use as their hosts' agents measure it (`lent`, host-state's unused_cpu summed).
    Revocable runs borrow it; the hosts take it back when their non-revocable runs want it, and
    preemption when non-revocable demand does."""
    held = ZERO
    for u in usage:
        held = held + u.non_slack_allocation  # type: ignore[operator]  # never None after __post_init__
    return Resources(cpu=(capacity - held).cpu + lent)


def leaves(pools: dict[str, dict]) -> set[str]:
    parents = {c["parent"] for c in pools.values()}
    return {p for p in pools if p not in parents}


def tree_entitlements(pools: dict[str, dict], usage: dict[str, PoolUsage], capacity: Resources,
                      lent: float = 0.0) -> dict:
    """compute_entitlements with the slack capacity the running system uses."""
    return compute_entitlements(pools, usage, capacity, slack_capacity(capacity, usage.values(), lent))


def _kinds(r: Resources) -> dict[str, float]:
    return {KIND_NAMES[f]: getattr(r, f) for f in ("cpu", "gpu", "mem_mb", "disk_mb")}


def up_to_root(pools: dict[str, dict], path: str) -> list[str]:
    """The pool and its ancestors, the root "/" last (a pool not in `pools` hangs off the root)."""
    chain = [path]
    while chain[-1] != "/":
        chain.append(pools[chain[-1]]["parent"] if chain[-1] in pools else "/")
    return chain


def pool_view(pools: dict[str, dict], published: dict[str, dict], host_states: Iterable[dict]) -> dict[str, dict]:
    """Per pool (the root "/" included): reservation, limit, share, entitlement, non-slack and
    slack entitlement, allocation and demand per Peloton kind, and the gangs it shows waiting.
    A parent's allocation and demand are its children's sums."""
    pools = {p: c for p, c in pools.items() if not c.get("deleted")}
    host_states = list(host_states)
    capacity = cluster_capacity(host_states)
    lent = sum(map(lent_by, host_states))
    usage = {p: usage_from_record(published[p]) if p in published else PoolUsage() for p in leaves(pools)}
    shares = tree_entitlements(pools, usage, capacity, lent)
    rolled: dict[str, tuple[Resources, Resources]] = {}
    for path, u in usage.items():  # add each leaf's usage to itself and every ancestor
        for node in up_to_root(pools, path):
            alloc, demand = rolled.get(node, (ZERO, ZERO))
            # allocation is never None after PoolUsage.__post_init__
            rolled[node] = (alloc + u.allocation, demand + u.demand + u.slack_demand)  # type: ignore[operator]
    view = {}
    for path in ["/", *sorted(pools)]:
        config = pools.get(path)
        if config is None:  # the root: the cluster
            reservation = limit = _kinds(capacity)
            share = {k: 1.0 for k in reservation}
        else:
            reservation = {r["kind"]: r["reservation"] for r in config["resources"]}
            limit = {r["kind"]: r["limit"] for r in config["resources"]}
            share = {r["kind"]: r["share"] for r in config["resources"]}
        s = shares[path]
        alloc, demand = rolled.get(path, (ZERO, ZERO))
        view[path] = {
            "path": path,
            "reservation": reservation, "limit": limit, "share": share,
            "entitlement": _kinds(s.entitlement),
            "non_slack_entitlement": _kinds(s.non_slack_entitlement),
            "slack_entitlement": _kinds(s.slack_entitlement),
            "allocation": _kinds(alloc), "demand": _kinds(demand),
            "waiting": list(published.get(path, {}).get("waiting", [])),
        }
    return view


def pool_usage(ledger: PoolLedger | None, queue: PoolQueue | None, published: dict | None) -> PoolUsage:
    """A pool's usage for the entitlement calculation: from its ledger and queue where this
    instance holds them, else from what its owner published (None: nobody did yet, or the pool
    is this instance's and empty)."""
    if ledger is not None or queue is not None:
        held = ledger.held.total if ledger else ZERO
        slack = ledger.slack.total if ledger else ZERO
        return PoolUsage(demand=queue.demand if queue else ZERO, slack_demand=queue.slack_demand if queue else ZERO,
                         allocation=held, non_slack_allocation=held - slack, slack_allocation=slack)
    return PoolUsage() if published is None else usage_from_record(published)


def sustained_over(over_periods: dict[str, int], ledgers: dict[str, PoolLedger], periods: int) -> list[str]:
    """The pools that held more than their entitlement for `periods` reclaim periods in a row,
    counting this one (`over_periods` keeps the count, and forgets a pool that is due)."""
    due = []
    for pool, ledger in ledgers.items():
        non_slack_excess, slack_excess = over_allocation(ledger)
        if non_slack_excess.fits_in(ZERO) and slack_excess.fits_in(ZERO):
            over_periods.pop(pool, None)
            continue
        over_periods[pool] = over_periods.get(pool, 0) + 1
        if over_periods[pool] >= periods:
            over_periods.pop(pool, None)
            due.append(pool)
    return due
