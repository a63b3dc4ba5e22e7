"""Per-pool queues and admission. Pure: no Kafka, no store.

This first version entitles each pool to its configured limit; hierarchical max-min fairness
(RESOURCE_MANAGER.md) replaces `entitlement` later without touching the queue or the ledger.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from peloton.model.resources import ZERO, Allocations, Resources


@dataclass(slots=True)
class QueuedGang:
    gang: dict  # the GangDemand record
    demand: Resources  # summed over its tasks
    priority: int
    seq: int
    source: tuple[str, int] = ("", 0)  # (topic id, partition) it was read from
    offset: int = -1


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
    """Peloton's PriorityFIFO: higher priority first, first come first within a priority."""

    _seq = itertools.count()

    def __init__(self):
        self._heap: list[tuple[int, int, QueuedGang]] = []
        self.gang_ids: set[str] = set()
        self.demand = ZERO

    def push(self, gang: dict, source: tuple[str, int] = ("", 0), offset: int = -1) -> QueuedGang:
        q = QueuedGang(gang, gang_demand(gang), gang["priority"], next(self._seq), source, offset)
        heapq.heappush(self._heap, (-q.priority, q.seq, q))
        self.gang_ids.add(gang["gang_id"])
        self.demand = self.demand + q.demand
        return q

    def head(self) -> QueuedGang | None:
        return self._heap[0][2] if self._heap else None

    def pop(self) -> QueuedGang:
        q = heapq.heappop(self._heap)[2]
        self.gang_ids.discard(q.gang["gang_id"])
        self.demand = self.demand - q.demand
        return q

    def __len__(self) -> int:
        return len(self._heap)


@dataclass(slots=True)
class PoolLedger:
    """What a pool may hold (its entitlement) and holds: one entry per admitted task run."""

    entitlement: Resources = ZERO
    held: Allocations = field(default_factory=Allocations)


def admit(queue: PoolQueue, ledger: PoolLedger, limit: int = 1000) -> list[QueuedGang]:
    """Admit gangs from the head of the queue while each fits within the entitlement, as a unit.

    A head gang that does not fit blocks its pool until the next tick (Peloton's rule), so a big
    gang is not starved by smaller ones behind it."""
    admitted = []
    while len(queue) and len(admitted) < limit:
        head = queue.head()
        if not (ledger.held.total + head.demand).fits_in(ledger.entitlement):
            break
        queue.pop()
        for t in head.gang["tasks"]:
            ledger.held.charge(t["task_id"], Resources.from_record(t["resources"]))
        admitted.append(head)
    return admitted
