"""A new owner of some pools rebuilds what the last one held from the store: each run's charge
on its pool's ledger, and each queued gang in its pool's queue, in its arrival order."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from peloton.model.resources import Resources
from peloton.store import Allocation, QueuedGang
from stages.entitle.admission import Charge, PoolLedger, PoolQueue


def restore(ledgers: dict[str, PoolLedger], queues: dict[str, PoolQueue], allocations: Iterable[Allocation],
            queued: Iterable[QueuedGang], taken: Callable[[str], bool]) -> tuple[set[str], int]:
    """Charges and queues of the pools `taken` says are now ours, added to `ledgers` and
    `queues`; the pools that changed, and the latest arrival of their queued gangs (0: none)."""
    changed = set()
    latest = 0
    for a in allocations:
        if taken(a.pool):
            ledger = ledgers.get(a.pool)
            if ledger is None:
                ledger = ledgers[a.pool] = PoolLedger()
            ledger.charge(Charge(a.task_id, a.gang_id, Resources(a.cpu, a.mem_mb, a.disk_mb, a.gpu), a.priority,
                                 a.preemptible, a.revocable, a.controller, a.admitted_ms))
            changed.add(a.pool)
    for q in queued:
        if taken(q.pool):
            latest = max(latest, q.seq)
            queue = queues.setdefault(q.pool, PoolQueue())
            if q.gang_id not in queue.gang_ids:
                queue.push(q.gang, q.seq, q.not_before_ms)
                changed.add(q.pool)
    return changed, latest
