"""Per-pool queues and admission. Pure: no Kafka, no store.

This first version entitles each pool to its configured limit; hierarchical max-min fairness
(see docs/design.md) replaces `entitlement` later without touching the queue or the ledger.

Admission is planned, then applied: `plan_admission` decides without changing the ledger or the
queue, the stage records the plan in the store, and only then `apply_admission` takes the gangs
off the queue and charges them. A store failure in between leaves the pool as it was.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field

from peloton.model.resources import ZERO, Allocations, Resources


@dataclass(slots=True, eq=False)
class QueuedGang:
    gang: dict  # the GangDemand record
    demand: Resources  # summed over its tasks
    priority: int
    seq: int
    source: tuple[str, int] = ("", 0)  # (topic id, partition) it was read from
    offset: int = -1
    record: object = None  # the Record it came in, for a dead letter if it must be refused
    blocked_since: float | None = None  # when it first failed to fit at the head of its queue
    removed: bool = False


def gang_demand(gang: dict) -> Resources:
    cpu = mem = disk = gpu = 0.0
    for t in gang["tasks"]:
        r = t["resources"]
        cpu += r["cpu"]
        mem += r["mem_mb"]
        disk += r["disk_mb"]
        gpu += r["gpu"]
    return Resources(cpu, mem, disk, gpu)


class PoolQueue:
    """Peloton's PriorityFIFO: higher priority first, first come first within a priority.

    One FIFO per priority, so admission can walk past a blocked head in order; removal from
    the middle marks the entry and the FIFO drops it when it reaches the front."""

    _seq = itertools.count()

    def __init__(self):
        self._fifos: dict[int, deque[QueuedGang]] = {}
        self._priorities: list[int] = []  # descending
        self._len = 0
        self.gang_ids: set[str] = set()
        self.demand = ZERO

    def push(self, gang: dict, source: tuple[str, int] = ("", 0), offset: int = -1, record=None) -> QueuedGang:
        q = QueuedGang(gang, gang_demand(gang), gang["priority"], next(self._seq), source, offset, record)
        if q.priority not in self._fifos:
            self._fifos[q.priority] = deque()
            self._priorities = sorted(self._fifos, reverse=True)
        self._fifos[q.priority].append(q)
        self._len += 1
        self.gang_ids.add(gang["gang_id"])
        self.demand = self.demand + q.demand
        return q

    def __iter__(self):
        """Gangs in admission order."""
        for p in self._priorities:
            for q in self._fifos[p]:
                if not q.removed:
                    yield q

    def head(self) -> QueuedGang | None:
        return next(iter(self), None)

    def remove(self, q: QueuedGang) -> None:
        if q.removed:
            return
        q.removed = True
        self._len -= 1
        self.gang_ids.discard(q.gang["gang_id"])
        self.demand = self.demand - q.demand
        fifo = self._fifos[q.priority]
        while fifo and fifo[0].removed:
            fifo.popleft()

    def pop(self) -> QueuedGang:
        q = self.head()
        if q is None:
            raise IndexError("pop from an empty pool queue")
        self.remove(q)
        return q

    def __len__(self) -> int:
        return self._len


@dataclass(slots=True)
class PoolLedger:
    """What a pool may hold (its entitlement) and holds: one entry per admitted task run."""

    entitlement: Resources = ZERO
    held: Allocations = field(default_factory=Allocations)


def plan_admission(queue: PoolQueue, ledger: PoolLedger, now: float = 0.0,
                   head_of_line_timeout: float = math.inf, limit: int = 1000) -> list[QueuedGang]:
    """The gangs to admit now, in order, each as a unit within the entitlement.

    A head gang that does not fit blocks its pool (Peloton's rule, so a big gang is not starved
    by smaller ones behind it), but only for `head_of_line_timeout` seconds: after that, gangs
    behind it that fit go first, so one gang that cannot fit does not stop its pool for ever.
    Changes nothing but the blocked gangs' `blocked_since`."""
    admitted: list[QueuedGang] = []
    room = ledger.entitlement - ledger.held.total
    passing = False  # walking past a head blocked beyond the bound
    for q in queue:
        if len(admitted) >= limit:
            break
        if q.demand.fits_in(room):
            admitted.append(q)
            room = room - q.demand
            continue
        if q.blocked_since is None:
            q.blocked_since = now
        if not passing:
            if now - q.blocked_since < head_of_line_timeout:
                break
            passing = True
    return admitted


def apply_admission(queue: PoolQueue, ledger: PoolLedger, admitted: list[QueuedGang]) -> None:
    for q in admitted:
        queue.remove(q)
        for t in q.gang["tasks"]:
            ledger.held.charge(t["task_id"], Resources.from_record(t["resources"]))


def admit(queue: PoolQueue, ledger: PoolLedger, now: float = 0.0, head_of_line_timeout: float = math.inf,
          limit: int = 1000) -> list[QueuedGang]:
    """Plan and apply at once (for callers with nothing to record in between)."""
    admitted = plan_admission(queue, ledger, now, head_of_line_timeout, limit)
    apply_admission(queue, ledger, admitted)
    return admitted


def why_waiting(q: QueuedGang, ledger: PoolLedger, now: float) -> str:
    """Why a queued gang is not admitted yet, with the numbers (Kueue's inadmissible message)."""
    room = ledger.entitlement - ledger.held.total
    short = [f"{kind} {getattr(q.demand, kind):g} (free {getattr(room, kind):g} of "
             f"{getattr(ledger.entitlement, kind):g})"
             for kind in ("cpu", "mem_mb", "disk_mb", "gpu")
             if getattr(q.demand, kind) > getattr(room, kind) + 0.0009]
    if short:
        needs = "; ".join(short)
        if not q.demand.fits_in(ledger.entitlement):
            return f"needs more than its pool's entitlement: {needs}"
        blocked = f" for {now - q.blocked_since:.0f}s" if q.blocked_since is not None else ""
        return f"waiting for room in its pool{blocked}: needs {needs}"
    return "waiting behind a higher-priority or earlier gang of its pool"

