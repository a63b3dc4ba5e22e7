"""What entitle tells of each pool it owns (a PoolEntitlement on the compacted entitlements topic):
its usage, which the other instances' calculations read, its entitlement and shares, and the first
gangs waiting with why each waits."""

from __future__ import annotations

import itertools

from peloton.model.pool import pool_resources
from peloton.model.resources import ZERO
from stages.entitle.admission import PoolLedger, PoolQueue, why_waiting

WAITING_SHOWN = 20  # gangs per pool whose reason for waiting is published, first in line first


def pool_entitlement(pool: str, ledger: PoolLedger, queue: PoolQueue | None, config: dict | None, now_ms: int,
                     mono: float) -> dict:
    """The pool's PoolEntitlement record, as of `now_ms` (the waits' reasons on the `mono` clock)."""
    waiting = [{"gang_id": q.gang["gang_id"], "job_id": q.gang["job_id"], "tasks": len(q.gang["tasks"]),
                "reason": why_waiting(q, ledger, mono, now_ms), "since_ms": q.gang["created_ms"]}
               for q in itertools.islice(queue or (), WAITING_SHOWN)]
    non_slack = ledger.non_slack_entitlement
    return {
        "pool": pool,
        "entitlement": ledger.entitlement.to_record(),
        "allocation": ledger.held.total.to_record(),
        "demand": (queue.demand if queue else ZERO).to_record(),
        "queued_gangs": len(queue) if queue else 0,
        "slack_demand": (queue.slack_demand if queue else ZERO).to_record(),
        "non_slack_allocation": ledger.non_slack_allocation.to_record(),
        "slack_allocation": ledger.slack.total.to_record(),
        "non_slack_entitlement": (ledger.entitlement if non_slack is None else non_slack).to_record(),
        "slack_entitlement": ledger.slack_entitlement.to_record(),
        "reservation": (pool_resources(config, "reservation") if config else ZERO).to_record(),
        "limit": (pool_resources(config, "limit") if config else ZERO).to_record(),
        "preempting": len(ledger.preempting),
        "computed_ms": now_ms,
        "waiting": waiting,
    }
