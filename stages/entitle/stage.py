"""entitle stage (resource manager): gang demand and releases in (key = pool); admitted gangs out
(key = pool), each pool's entitlement, allocation and demand out (compacted), preemptions out.

Kueue's split: the pool tree and every pool's usage are the cache, PoolQueue the queue manager,
and `_admit` the scheduler.
- Pools come from the store, the one source of truth for them: a pool change is one row, seen by
  every stage at its next read, or by none.
- Every instance publishes the usage (demand and allocation) of the pools it owns to the
  compacted entitlements topic and reads every pool's usage back from it, computes the whole
  tree's entitlement itself (deterministic and cheap, so no leader is needed), and admits only
  its own pools' gangs against it. The root's capacity is the sum of the UP hosts in host state.
- Durable state, all of it entitle's own: the allocations table (one row per admitted task run,
  held until the run ends, then kept a while as released) and the queued_gangs table (the pools'
  queues). Offsets commit as gangs are queued; a new owner of a partition rebuilds its pools'
  queues and ledgers from the two tables.
- Preemption: a pool above its entitlement for `preemption_sustained_periods` periods in a row
  has its excess preempted; a higher-priority gang that cannot be admitted preempts
  lower-priority runs of its own pool. A victim gets a TASK_KILLING status (the job manager shows
  it PREEMPTING) and a TaskKill on every host shard's partition of the placements topic; the
  KILLED that follows releases its allocation and the job manager runs it again.
"""

from __future__ import annotations

import itertools
import logging
import time

from peloton import metrics
from peloton.config import Settings
from peloton.model.events import send_progress
from peloton.model.gang import gang_problem
from peloton.model.host_capacities import HOST_CAPACITY, HostCapacities
from peloton.model.mesos import MesosState
from peloton.model.resources import ZERO
from peloton.runtime import CompactedView, Emitter, Record, Stage, Sweep, now_ms
from peloton.runtime.readback import committed_since
from peloton.store import Allocation, AllocationStore, QueuedGang
from peloton.topics import Catalogue, partition_for
from stages.entitle.admission import (
    Charge,
    PoolLedger,
    PoolQueue,
    apply_admission,
    charges_of,
    plan_admission,
    priority_victims,
    reclaim_victims,
)
from stages.entitle.admission import QueuedGang as QueuedEntry
from stages.entitle.entitlement import PoolUsage
from stages.entitle.publish import pool_entitlement
from stages.entitle.restore import restore
from stages.entitle.shares import apply_share, preemption_records
from stages.entitle.usage import (
    leaves,
    pool_usage,
    sustained_over,
    tree_entitlements,
)

log = logging.getLogger("peloton.entitle")

TOPIC = "task-demand"
# Ended runs older than released_keep_s are forgotten hourly, up to 10,000 a tick.
RELEASED_SWEEP = (3600.0, 10_000)


class EntitleStage(Stage):
    name = "entitle"
    inputs = (TOPIC,)

    def __init__(self, store: AllocationStore, usage: CompactedView | None = None,
                 hosts: CompactedView | None = None):
        self.store = store
        self.usage_view = usage  # the entitlements topic: every pool's usage, as its owner publishes it
        self.hosts = hosts  # host state: the root's capacity
        self.read_back = committed_since  # what admitted-gangs holds (unit tests give their own)
        self.pools: dict[str, dict] = {}
        self.queues: dict[str, PoolQueue] = {}
        self.ledgers: dict[str, PoolLedger] = {}
        self.owned: set[int] = set()
        self.shares: dict = {}  # path -> PoolShare, the last calculation
        self.capacity = ZERO
        self.cluster = HostCapacities()  # the UP hosts' capacity, from host-state's changes
        self.over_periods: dict[str, int] = {}
        self._dirty = True  # an input of the calculation changed since it last ran
        self._changed_pools: set[str] = set()  # own pools to publish at the next pass
        # Admitted gangs sent since the last tick ended, and those sent before it (flushed since:
        # the runtime flushes after every tick), whose outbox rows can go.
        self._unsent: list[str] = []
        self._flushed: list[str] = []
        # Gangs queued by this batch whose queue row is not written yet (gang id -> its entry in
        # the pool's queue, which holds all its row says: _row). One admitted in the batch it came
        # in never needs a row: its demand's offset commits with its admission, and a demand read
        # again finds its allocation held and sends the admission again. The rest are written
        # before the batch ends, so their offsets never commit before they are stored.
        self._unstored: dict[str, QueuedEntry] = {}
        self._last_admit = self._last_publish = self._last_pools = self._last_reclaim = self._last_entitled = 0.0
        self.released_sweep = Sweep(*RELEASED_SWEEP)
        self._seq = 0
        self.admitted_gangs = 0
        self.preempted_runs = 0

    def bind(self, emitter: Emitter, settings: Settings, catalogue: Catalogue) -> None:
        super().bind(emitter, settings, catalogue)
        self.partitions = catalogue[TOPIC].partitions
        if self.usage_view is None:
            self.usage_view = CompactedView(settings, "entitlements", catalogue)
        if self.hosts is None:
            self.hosts = CompactedView(settings, "host-state", catalogue, head=HOST_CAPACITY)
        self._read_pools()

    # -- ownership ----------------------------------------------------------------------------
    def _partition(self, pool: str) -> int:
        return partition_for(pool, self.partitions)

    def on_assign(self, partitions: list[tuple[str, int]]) -> None:
        new = {p for t, p in partitions if t == TOPIC}
        self.owned |= new
        def taken(pool: str) -> bool:
            return self._partition(pool) in new

        changed, latest = restore(self.ledgers, self.queues, self.store.allocations(), self.store.queued_gangs(), taken)
        self._changed_pools |= changed
        self._seq = max(self._seq, latest)
        self._resend_admissions(new)
        self._dirty = True

    def _resend_admissions(self, partitions: set[int]) -> None:
        """Admissions the last owner stored but may have died before sending: those the
        admitted-gangs topic does not hold (committed) are sent again. When the topic cannot be
        read back, all are sent (place and launch drop what they already have)."""
        unsent = [q for q in self.store.unsent_admissions() if self._partition(q.pool) in partitions]
        if not unsent:
            return
        count = self.catalogue["admitted-gangs"].partitions
        items = self.read_back(self.settings, self.catalogue, "admitted-gangs",
                               sorted({partition_for(q.pool, count) for q in unsent}),
                               min(q.admitted_ms for q in unsent), self.settings.transaction_timeout_s + 5)
        out = {v["gang"]["gang_id"] for schema, v in items or () if schema == "peloton.AdmittedGang"}
        went = [q.gang_id for q in unsent if q.gang_id in out]
        if went:
            self.store.admissions_sent(went)
        for q in unsent:
            self._seq = max(self._seq, q.seq)
            if q.gang_id not in out:
                self.emit.emit("admitted-gangs", q.pool, "peloton.AdmittedGang",
                               {"gang": q.gang, "admitted_ms": now_ms()})
                self._unsent.append(q.gang_id)
        log.info("admissions the last owner stored: %d already sent, %d sent now%s", len(went), len(unsent) - len(went),
                 "" if items is not None else " (the topic could not be read back)")

    def on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        gone = {p for t, p in partitions if t == TOPIC}
        self.owned -= gone
        for pool in [p for p in set(self.ledgers) | set(self.queues) if self._partition(p) in gone]:
            self.ledgers.pop(pool, None)
            self.queues.pop(pool, None)
            self.over_periods.pop(pool, None)
        self._dirty = True

    def _forget_released(self, now: float) -> None:
        """Ended runs are remembered a while (released_keep_s), to recognise a late redelivery of
        their demand; then forgotten, a batch a tick (a busy hour ends millions of runs)."""
        before = now_ms() - int(self.settings.released_keep_s * 1000)
        gone = self.released_sweep.done(now, self.store.forget_released_allocations(before, self.released_sweep.batch))
        if gone:
            log.info("forgot %d runs that ended more than %gs ago", gone, self.settings.released_keep_s)

    def _ledger(self, pool: str) -> PoolLedger:
        ledger = self.ledgers.get(pool)
        if ledger is None:  # (not setdefault: its default would be made at every call)
            ledger = self.ledgers[pool] = PoolLedger()
            metrics.at_zero(metrics.PREEMPTIONS, (pool, "inter_pool"), (pool, "priority"))
        return ledger

    def _next_seq(self) -> int:
        """Arrival order that a later owner keeps: time-based, so a gang queued by another
        instance earlier sorts earlier, and strictly increasing here."""
        self._seq = max(self._seq + 1, time.time_ns() // 1000)
        return self._seq

    # -- input --------------------------------------------------------------------------------
    def handle(self, records: list[Record]) -> None:
        try:
            # In the order they came: a gang and the end of one of its runs may share a batch.
            for is_release, run in itertools.groupby(records, key=lambda r: r.schema == "peloton.TaskRelease"):
                (self._release if is_release else self._enqueue)(list(run))
            self._admit()
            if self._unstored:  # still waiting: queued in the store before the batch's offsets commit
                self.store.queue_gangs([_row(entry) for entry in self._unstored.values()])
        except BaseException:
            # The batch is read or handled again: what it queued goes, as if it never came.
            for entry in self._unstored.values():
                self.queues[entry.gang["pool"]].remove(entry)
            raise
        finally:
            self._unstored.clear()

    def _release(self, records: list[Record]) -> None:
        ended: list[str] = []
        requeued: list[str] = []
        unqueued: list[str] = []
        changed: list[QueuedGang] = []
        for r in records:
            pool, task_id = r.value["pool"], r.value["task_id"]
            ledger = self.ledgers.get(pool)
            if ledger is not None and ledger.release(task_id):
                self._changed_pools.add(pool)
            elif r.value["reason"] != MesosState.TASK_DROPPED and pool in self.queues:
                # It ended before it was admitted (a stop): out of its queued gang.
                dropped = self.queues[pool].drop_task(task_id)
                if dropped is not None:
                    before, after = dropped
                    unstored = self._unstored.pop(before.gang["gang_id"], None) is not None
                    if not unstored:
                        unqueued.append(before.gang["gang_id"])
                    if after is not None:
                        if unstored:
                            self._unstored[after.gang["gang_id"]] = after
                        else:
                            changed.append(_row(after))
                    self._changed_pools.add(pool)
            # A refused placement sends the same run back to the queue: forget it, so it
            # can be admitted again. Any other release ends the run for good.
            (requeued if r.value["reason"] == MesosState.TASK_DROPPED else ended).append(task_id)
        with self.store.transaction():
            self.store.release_allocations(ended, now_ms())
            self.store.remove_allocations(requeued)
            self.store.unqueue_gangs(unqueued)
            self.store.queue_gangs(changed)
        self._dirty = True

    def _enqueue(self, records: list[Record]) -> None:
        """Queue new gangs: in the store by the batch's end unless admitted by then, so before
        their offsets commit (see _unstored). What this pool already queued is dropped; what it
        admitted is sent again (see below); a run it admitted that has ended is never admitted
        again. Entitle knows all of this from its own tables."""
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
        seen_now: set[str] = set()
        backoff_ms = int(self.settings.requeue_backoff_s * 1000)
        for r in candidates:
            g = r.value
            seen = [states.get(t["task_id"]) for t in g["tasks"]]
            if "released" in seen or g["gang_id"] in seen_now:
                continue  # a redelivery of a gang that already ran, or twice in this batch
            if all(s == "held" for s in seen):
                # Admitted, and demanded again: only a repeated create or the job manager's
                # recovery after the broker lost its log sends that, and the admission may never
                # have reached placement. Send it again; place and launch drop what they have.
                self.emit.emit("admitted-gangs", g["pool"], "peloton.AdmittedGang",
                               {"gang": g, "admitted_ms": now_ms()})
                continue
            seen_now.add(g["gang_id"])
            # A gang sent back by placement (its id says so) waits out a backoff first, and a
            # SERVICE task's next run its restart backoff.
            not_before = max(now_ms() + backoff_ms if "~" in g["gang_id"] else 0, g.get("not_before_ms", 0))
            queue = self.queues.get(g["pool"])
            if queue is None:  # (not setdefault: its default, a PoolQueue, would be made per gang)
                queue = self.queues[g["pool"]] = PoolQueue()
            # stored at the batch's end, if not admitted by then (self._unstored)
            self._unstored[g["gang_id"]] = queue.push(g, self._next_seq(), not_before, r)
            self._changed_pools.add(g["pool"])
        if seen_now:
            self._dirty = True

    # -- the tree -----------------------------------------------------------------------------
    def _read_pools(self) -> None:
        pools = {p: c for p, c in self.store.list_pools().items() if not c.get("deleted")}
        if pools != self.pools:
            self.pools = pools
            self._dirty = True
        self._last_pools = time.monotonic()

    def _usage_of(self, pool: str, published: dict[str, dict]) -> PoolUsage:
        ledger, queue = self.ledgers.get(pool), self.queues.get(pool)
        # Another owner's record counts only for a pool this instance neither holds nor owns.
        held_here = ledger is not None or queue is not None or self._partition(pool) in self.owned
        return pool_usage(ledger, queue, None if held_here else published.get(pool))

    def _entitle(self) -> None:
        """Recompute every pool's entitlement from every pool's usage, then give each owned
        pool's ledger its share."""
        usage_view, hosts = self.usage_view, self.hosts
        assert usage_view is not None and hosts is not None  # bind made them
        self.capacity = self.cluster.up_total(hosts.values)
        published = usage_view.values  # every pool's usage, as its owner publishes it
        try:
            self.shares = tree_entitlements(self.pools, {p: self._usage_of(p, published) for p in leaves(self.pools)},
                                            self.capacity, self.cluster.lent_total(hosts.values))
        except ValueError as exc:  # a tree the store should never hold (a pool without its parent)
            log.error("pool tree not usable, entitlements kept as they were: %s", exc)
            return
        for pool, ledger in self.ledgers.items():
            self._apply_share(pool, ledger)
        self._dirty = False

    def _apply_share(self, pool: str, ledger: PoolLedger) -> None:
        if apply_share(ledger, self.shares.get(pool), self.pools.get(pool)):
            self._changed_pools.add(pool)

    # -- admission ----------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        if self._flushed:
            self.store.admissions_sent(self._flushed)
            self._flushed = []
        self._tick(now)
        self._flushed, self._unsent = self._unsent, []

    def _tick(self, now: float) -> None:
        usage_view, hosts = self.usage_view, self.hosts
        assert usage_view is not None and hosts is not None  # bind made them
        usage_changed, hosts_changed = usage_view.poll(), hosts.poll()
        self.cluster.update(hosts_changed)
        if usage_changed or hosts_changed:
            self._dirty = True
        if now - self._last_pools >= self.settings.pool_refresh_s:
            self._read_pools()  # dirty when the tree changed
        if now - self._last_entitled >= self.settings.entitlement_period_s:
            self._last_entitled = now
            self._dirty = True  # at least once a period, whatever changed
        if now - self._last_admit >= self.settings.admission_tick_s:
            self._admit()
        period = self.settings.preemption_period_s
        if period > 0 and now - self._last_reclaim >= period:
            self._last_reclaim = now
            self._reclaim()
        if self.released_sweep.due(now):
            self._forget_released(now)
        if now - self._last_publish >= self.settings.entitlement_period_s:
            self._publish(set(self.ledgers) | set(self.queues))
            self._last_publish = now
        elif self._changed_pools:
            self._publish(self._changed_pools)

    def _admit(self) -> None:
        """Plan every pool's admissions, record them in the store, and only then take the gangs
        off their queues and send them: a store failure leaves queues and ledgers untouched."""
        if self._dirty:
            self._entitle()
        now = self._last_admit = time.monotonic()
        admitted_at = now_ms()
        rows: list[Allocation] = []
        charges: dict[str, list] = {}  # gang id -> its tasks' charges, for the rows and the ledger alike
        plans = []
        for pool, queue in self.queues.items():
            if not len(queue):
                continue
            if pool not in self.pools:
                continue  # its pool is not in the store (yet): keep the gangs queued
            ledger = self._ledger(pool)
            self._apply_share(pool, ledger)
            chosen = plan_admission(queue, ledger, now, self.settings.head_of_line_timeout_s, self.settings.max_batch,
                                    now_ms=admitted_at)
            if not chosen:
                self._preempt_for_priority(pool, queue, ledger)
                continue
            plans.append((pool, queue, ledger, chosen))
            for q in chosen:
                charges[q.gang["gang_id"]] = of_gang = charges_of(q, admitted_at)
                for c in of_gang:
                    r = c.resources
                    rows.append(Allocation(c.task_id, pool, c.gang_id, r.cpu, r.mem_mb, r.disk_mb, r.gpu, admitted_at,
                                           c.priority, c.preemptible, c.revocable, c.controller))
        if not plans:
            return
        ids = [q.gang["gang_id"] for *_, chosen in plans for q in chosen]
        unstored = {i for i in ids if i in self._unstored}  # queued by this batch: no row to mark
        taken = self.store.admit_gangs([i for i in ids if i not in unstored],
                                       [a for a in rows if a.gang_id not in unstored],
                                       [a for a in rows if a.gang_id in unstored]) | unstored
        for i in unstored:
            del self._unstored[i]
        for pool, queue, ledger, chosen in plans:
            lost = [q for q in chosen if q.gang["gang_id"] not in taken]
            for q in lost:  # another instance admitted it (it owned the pool a moment ago)
                queue.remove(q)
            chosen = [q for q in chosen if q.gang["gang_id"] in taken]
            apply_admission(queue, ledger, chosen, admitted_at, charges)
            # READY only for a gang that waited for admission (queued past the batch that brought
            # it): one admitted at once goes on from PENDING, as Peloton's job manager shows it.
            # It goes out first, so the job manager hears it before placement can say PLACING.
            send_progress(self.emit, "READY", [(t, "") for q in chosen if q.gang["gang_id"] not in unstored
                                               for t in q.gang["tasks"]])
            for q in chosen:
                self.emit.emit("admitted-gangs", pool, "peloton.AdmittedGang",
                               {"gang": q.gang, "admitted_ms": admitted_at})
                if q.gang["gang_id"] not in unstored:  # its row, marked admitted, goes once this is sent
                    self._unsent.append(q.gang["gang_id"])
            self.admitted_gangs += len(chosen)
            metrics.ADMISSIONS.labels(pool).inc(len(chosen))
            metrics.ADMITTED_TASKS.labels(pool).inc(sum(len(q.gang["tasks"]) for q in chosen))
            self._changed_pools.add(pool)
        self._dirty = True  # allocations moved: others' shares may too

    # -- preemption ---------------------------------------------------------------------------
    def _reclaim(self) -> None:
        """Inter-pool reclaim: count the periods each own pool spends above its entitlement and
        preempt the excess of one that stays above for the configured number of periods."""
        if self._dirty:
            self._entitle()
        for pool in sustained_over(self.over_periods, self.ledgers, self.settings.preemption_sustained_periods):
            ledger = self.ledgers[pool]
            victims = reclaim_victims(ledger)
            if victims:
                self._preempt(pool, ledger, victims, f"resource pool {pool} held more than its entitlement for "
                              f"{self.settings.preemption_sustained_periods} periods", "inter_pool")

    def _preempt_for_priority(self, pool: str, queue: PoolQueue, ledger: PoolLedger) -> None:
        if self.settings.preemption_period_s <= 0:
            return
        head = queue.head()
        if head is None or head.side is not None or head.not_before_ms > now_ms():
            return
        victims = priority_victims(head, ledger)
        if victims:
            self._preempt(pool, ledger, victims, f"a priority {head.priority} gang of job {head.gang['job_id']} "
                          f"needs room in resource pool {pool}", "priority")

    def _preempt(self, pool: str, ledger: PoolLedger, victims: list[Charge], why: str, kind: str) -> None:
        """Stop each victim wherever it is: a TASK_KILLING status tells the job manager (the task
        shows PREEMPTING) and a TaskKill on every partition of the placements topic stops the run, or keeps
        it from starting if it is not launched yet. The KILLED that follows releases it."""
        victims_by_id = {c.task_id: c.resources for c in victims}
        for job_id, task_id, status, kill in preemption_records(victims, why, now_ms()):
            ledger.preempting[task_id] = victims_by_id[task_id]
            self.emit.emit("task-status", job_id, "peloton.TaskStatus", status)
            self.emit.emit_to_every_partition("placements", task_id, "peloton.TaskKill", kill)
        self.preempted_runs += len(victims)
        metrics.PREEMPTIONS.labels(pool, kind).inc(len(victims))
        self._changed_pools.add(pool)
        log.info("pool %s: preempting %d runs (%s)", pool, len(victims), why)

    # -- what the pools look like ---------------------------------------------------------------
    def _publish(self, pools: set[str]) -> None:
        """Each own pool's usage (the others' calculation reads it), entitlement and first waiting
        gangs with their reasons."""
        now, mono = now_ms(), time.monotonic()
        for pool in sorted(pools):
            record = pool_entitlement(pool, self.ledgers.get(pool) or PoolLedger(), self.queues.get(pool),
                                      self.pools.get(pool), now, mono)
            metrics.set_pool(metrics.POOL_ENTITLEMENT, pool, record["entitlement"])
            metrics.set_pool(metrics.POOL_ALLOCATION, pool, record["allocation"])
            metrics.set_pool(metrics.POOL_DEMAND, pool, record["demand"])
            metrics.POOL_QUEUED_GANGS.labels(pool).set(record["queued_gangs"])
            self.emit.emit("entitlements", pool, "peloton.PoolEntitlement", record)
        self._changed_pools -= pools

    def views(self) -> list:
        return [self.usage_view, self.hosts]

    def close(self) -> None:
        for view in (self.usage_view, self.hosts):
            if view is not None:
                view.close()


def _row(entry: QueuedEntry) -> QueuedGang:
    """The store's row of a gang queued in a pool's queue."""
    g = entry.gang
    return QueuedGang(g["gang_id"], g["pool"], entry.priority, entry.seq, g, entry.not_before_ms)
