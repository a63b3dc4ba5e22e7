"""entitle stage: gang demand and releases in (key = pool); admitted gangs out (key = pool).

Durable state: the allocations table (one row per admitted task run, held until the run ends,
then kept a while as released). On partition assignment the ledgers of the pools on those
partitions are rebuilt from it. Entitle reads no other stage's tables. Queued gangs are not written
anywhere: their offsets are held uncommitted, so after a crash the next owner reads them again.
"""

from __future__ import annotations

import itertools
import logging
import time

from peloton.model.gang import gang_problem
from peloton.model.pool import pool_limit
from peloton.model.resources import Resources
from peloton.runtime import CompactedView, HeldOffsets, Record, Stage, now_ms
from peloton.store import Allocation, AllocationStore
from peloton.topics import partition_for
from stages.entitle.admission import PoolLedger, PoolQueue, apply_admission, plan_admission, why_waiting

log = logging.getLogger("peloton.entitle")

TOPIC = "task-demand"
WAITING_SHOWN = 20  # gangs per pool whose reason for waiting is published


class EntitleStage(Stage):
    name = "entitle"
    inputs = (TOPIC,)

    def __init__(self, store: AllocationStore, pools: CompactedView | None = None):
        self.store = store
        self.pools = pools  # the pools topic; read from the broker unless given
        self.queues: dict[str, PoolQueue] = {}
        self.ledgers: dict[str, PoolLedger] = {}
        self.held = HeldOffsets()
        self.owned: set[int] = set()
        self._last_admit = 0.0
        self._last_publish = 0.0
        self.admitted_gangs = 0

    def bind(self, emitter, settings, catalogue) -> None:
        super().bind(emitter, settings, catalogue)
        self.partitions = catalogue[TOPIC].partitions
        if self.pools is None:
            self.pools = CompactedView(settings, "pools", catalogue)

    # -- ownership ----------------------------------------------------------------------------
    def _partition(self, pool: str) -> int:
        return partition_for(pool, self.partitions)

    def on_assign(self, partitions: list[tuple[str, int]]) -> None:
        new = {p for t, p in partitions if t == TOPIC}
        self.owned |= new
        # Ended runs are remembered a while, to recognise late redeliveries; then forgotten.
        self.store.forget_released_allocations(now_ms() - int(self.settings.released_keep_s * 1000))
        for a in self.store.allocations():
            if self._partition(a.pool) in new:
                ledger = self.ledgers.setdefault(a.pool, PoolLedger())
                ledger.held.charge(a.task_id, Resources(a.cpu, a.mem_mb, a.disk_mb, a.gpu))

    def on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        gone = {p for t, p in partitions if t == TOPIC}
        self.owned -= gone
        for pool in [p for p in self.ledgers if self._partition(p) in gone]:
            self.ledgers.pop(pool, None)
            self.queues.pop(pool, None)
        for p in gone:
            self.held.drop((TOPIC, p))

    def held_offsets(self) -> dict[tuple[str, int], int]:
        return self.held.lowest()

    # -- input --------------------------------------------------------------------------------
    def handle(self, records: list[Record]) -> None:
        releases = [r for r in records if r.schema == "peloton.TaskRelease"]
        if releases:
            ended, requeued = [], []
            for r in releases:
                ledger = self.ledgers.get(r.value["pool"])
                if ledger is not None:
                    ledger.held.release(r.value["task_id"])
                # A refused placement sends the same run back to the queue: forget it, so it
                # can be admitted again. Any other release ends the run for good.
                (requeued if r.value["reason"] == "TASK_DROPPED" else ended).append(r.value["task_id"])
            self.store.release_allocations(ended, now_ms())
            self.store.remove_allocations(requeued)
        gangs = [r for r in records if r.schema == "peloton.GangDemand"]
        if gangs:
            self._enqueue(gangs)
        self._admit()

    def _enqueue(self, records: list[Record]) -> None:
        """Queue new gangs. What this pool already queued is dropped; what it admitted is sent
        again (see below); a run it admitted that has ended is never admitted again. Entitle
        knows all of this from its own allocations, one store read per batch."""
        candidates = []
        for r in records:
            g = r.value
            problem = gang_problem(g)
            if problem:
                self.refuse(r, g["tasks"], problem)
                continue
            queue = self.queues.get(g["pool"])
            if queue is not None and g["gang_id"] in queue.gang_ids:
                continue
            candidates.append(r)
        states = self.store.allocation_states([t["task_id"] for r in candidates for t in r.value["tasks"]])
        for r in candidates:
            g = r.value
            seen = [states.get(t["task_id"]) for t in g["tasks"]]
            if "released" in seen:
                continue  # a redelivery of a gang that already ran
            if all(s == "held" for s in seen):
                # Admitted, and demanded again: only a repeated create or the job manager's
                # recovery after the broker lost its log sends that, and the admission may never
                # have reached placement. Send it again; place and launch drop what they have.
                self.emit.emit("admitted-gangs", g["pool"], "peloton.AdmittedGang", {"gang": g, "admitted_ms": now_ms()})
                continue
            tp = (r.topic, r.partition)
            self.queues.setdefault(g["pool"], PoolQueue()).push(g, tp, r.offset, r)
            self.held.hold(tp, r.offset)

    # -- admission ----------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        self.pools.poll()
        if now - self._last_admit >= self.settings.admission_tick_s:
            self._admit()
        if now - self._last_publish >= 1.0:
            self._publish_entitlements()
            self._last_publish = now

    def _admit(self) -> None:
        """Plan every pool's admissions, record them in the store, and only then take the gangs
        off their queues and send them: a store failure leaves queues and ledgers untouched."""
        now = self._last_admit = time.monotonic()
        admitted_at = now_ms()
        rows: list[Allocation] = []
        plans = []
        for pool, queue in self.queues.items():
            if not len(queue):
                continue
            config = self.pools.values.get(pool)
            if config is None or config.get("deleted"):
                continue  # its config has not reached us yet: keep the gangs queued
            ledger = self.ledgers.setdefault(pool, PoolLedger())
            ledger.entitlement = pool_limit(config)
            chosen = plan_admission(queue, ledger, now, self.settings.head_of_line_timeout_s)
            if not chosen:
                continue
            plans.append((queue, ledger, chosen))
            for q in chosen:
                for t in q.gang["tasks"]:
                    r = t["resources"]
                    rows.append(Allocation(t["task_id"], pool, q.gang["gang_id"], r["cpu"], r["mem_mb"],
                                           r["disk_mb"], r["gpu"], admitted_at))
        if not plans:
            return
        self.store.add_allocations(rows)  # charged before anything is sent
        for queue, ledger, chosen in plans:
            apply_admission(queue, ledger, chosen)
            for q in chosen:
                self.emit.emit("admitted-gangs", q.gang["pool"], "peloton.AdmittedGang",
                               {"gang": q.gang, "admitted_ms": admitted_at})
                self.held.release(q.source, q.offset)
            self.admitted_gangs += len(chosen)

    def _publish_entitlements(self) -> None:
        now, mono = now_ms(), time.monotonic()
        for pool, ledger in self.ledgers.items():
            queue = self.queues.get(pool)
            waiting = []
            for q in itertools.islice(queue or (), WAITING_SHOWN):
                waiting.append({"gang_id": q.gang["gang_id"], "job_id": q.gang["job_id"],
                                "tasks": len(q.gang["tasks"]), "reason": why_waiting(q, ledger, mono),
                                "since_ms": q.gang["created_ms"]})
            self.emit.emit("entitlements", pool, "peloton.PoolEntitlement", {
                "pool": pool,
                "entitlement": ledger.entitlement.to_record(),
                "allocation": ledger.held.total.to_record(),
                "demand": (queue.demand if queue else Resources()).to_record(),
                "queued_gangs": len(queue) if queue else 0,
                "computed_ms": now,
                "waiting": waiting,
            })

    def close(self) -> None:
        self.pools.close()
