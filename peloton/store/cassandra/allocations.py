"""Pools' charges (allocations) and queues (gangs), the AllocationStore role: both in the pool's
partition of pool_ledger, so that admitting a gang is one conditional batch."""

from __future__ import annotations

import time
from collections.abc import Sequence

from cassandra.concurrent import execute_concurrent
from cassandra.query import BatchStatement, BatchType

from peloton.store.base import Allocation, QueuedGang
from peloton.store.cassandra.session import CONCURRENCY, TS, CassandraSession, distinct, insert_cql
from peloton.store.rows import QUEUED_COLS, allocation_from_row, allocation_params, json_text, queued_from_row

# pool_ledger's columns of a charge ('a' rows) and of a queued gang ('g' rows).
_LEDGER_ALLOCATION = ("pool, kind, id, gang_id, cpu, mem_mb, disk_mb, gpu, admitted_ms, priority, preemptible, "
                      "revocable, controller, released_ms")
_LEDGER_GANG = "pool, kind, id, priority, seq, gang, not_before_ms, admitted_ms"


def _allocation_params(a: Allocation) -> tuple:
    """pool_ledger's columns of an allocation (_LEDGER_ALLOCATION), held (released_ms null)."""
    (task_id, pool, gang_id, cpu, mem, disk, gpu, admitted, priority, preemptible, revocable,
     controller) = allocation_params(a)
    return (pool, "a", task_id, gang_id, cpu, mem, disk, gpu, admitted, priority, preemptible, revocable, controller,
            None)


class AllocationsMixin(CassandraSession):
    """A ledger row is found by its id through ledger_index (id -> pool), and a pool's rows by
    ledger_pools; both are written before the rows themselves."""

    # -- allocations and pool queues: one partition per pool ---------------------------------
    def _pools_of(self, kind: str, ids: list[str]) -> dict[str, str]:
        """id -> pool of the ledger rows of these ids (kind 'a': task ids, 'g': gang ids)."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        rows = self._rows_in("SELECT id, pool FROM ledger_index WHERE id IN ?", [f"{kind}:{i}" for i in ids])
        return {key[2:]: pool for key, pool in rows}

    def _ledger(self, kind: str, cols: str, pools: list[str] | None = None) -> list[tuple]:
        """Rows of one kind in these pools' partitions (every pool's, by ledger_pools, when None)."""
        if pools is None:
            pools = [r[0] for r in self._rows("SELECT pool FROM ledger_pools WHERE bucket = 0")]
        if not pools:
            return []
        return self._rows_each(f"SELECT {cols} FROM pool_ledger WHERE pool = ? AND kind = '{kind}'",
                               [(p,) for p in pools])

    def _ledger_rows(self, kind: str, cols: str, ids: list[str]) -> list[tuple]:
        """The ledger rows of these ids, read in their pools' partitions."""
        by_pool: dict[str, list[str]] = {}
        for i, pool in self._pools_of(kind, ids).items():
            by_pool.setdefault(pool, []).append(i)
        return self._rows_each(f"SELECT {cols} FROM pool_ledger WHERE pool = ? AND kind = '{kind}' AND id IN ?",
                               list(by_pool.items())) if by_pool else []

    def _index_ledger(self, kind: str, rows: list[tuple[str, str]]) -> None:
        """(id, pool) pairs: found by id, and their pools listed (before the rows themselves)."""
        self._write(insert_cql("ledger_index", "id, pool"), [(f"{kind}:{i}", pool, TS) for i, pool in rows])
        self._write(insert_cql("ledger_pools", "bucket, pool"), [(0, pool, TS) for pool in {p for _i, p in rows}])

    def allocations(self, pools: list[str] | None = None) -> list[Allocation]:
        cols = "id, pool, gang_id, cpu, mem_mb, disk_mb, gpu, admitted_ms, priority, preemptible, revocable, " \
               "controller, released_ms"
        return [allocation_from_row(r) for r in self._ledger("a", cols, distinct(pools)) if r[12] is None]

    def add_allocations(self, rows: list[Allocation]) -> None:
        self._index_ledger("a", [(a.task_id, a.pool) for a in rows])
        self._write(insert_cql("pool_ledger", _LEDGER_ALLOCATION), [_allocation_params(a) + (TS,) for a in rows])

    def release_allocations(self, task_ids: list[str], released_ms: int) -> None:
        held = [r for r in self._ledger_rows("a", "pool, id, released_ms", task_ids) if r[2] is None]
        self._write("UPDATE pool_ledger USING TIMESTAMP ? SET released_ms = ? WHERE pool = ? AND kind = 'a' AND id = ?",
                    [(TS, released_ms, pool, i) for pool, i, _r in held])

    def remove_allocations(self, task_ids: list[str]) -> None:
        pools = self._pools_of("a", task_ids)
        self._write("DELETE FROM pool_ledger USING TIMESTAMP ? WHERE pool = ? AND kind = 'a' AND id = ?",
                    [(TS, pool, i) for i, pool in pools.items()])
        self._write("DELETE FROM ledger_index USING TIMESTAMP ? WHERE id = ?", [(TS, f"a:{i}") for i in pools])

    def allocation_states(self, task_ids: list[str]) -> dict[str, str]:
        return {i: "held" if released is None else "released"
                for i, released in self._ledger_rows("a", "id, released_ms", task_ids)}

    def forget_released_allocations(self, before_ms: int, limit: int) -> int:
        """Every one the scan finds, whatever the limit: the scan reads the whole ledger anyway."""
        old = [(pool, i) for pool, i, released in self._ledger("a", "pool, id, released_ms")
               if released is not None and released < before_ms]
        self._write("DELETE FROM pool_ledger USING TIMESTAMP ? WHERE pool = ? AND kind = 'a' AND id = ?",
                    [(TS, pool, i) for pool, i in old])
        self._write("DELETE FROM ledger_index USING TIMESTAMP ? WHERE id = ?", [(TS, f"a:{i}") for _p, i in old])
        return len(old)

    def queue_gangs(self, rows: list[QueuedGang]) -> None:
        """A gang already queued (or admitted, not yet sent) is left as it is."""
        queued = {r[0] for r in self._ledger_rows("g", "id", [q.gang_id for q in rows])}
        tx = self._tx()
        if tx is not None:
            queued -= tx.unqueued
        new = list({q.gang_id: q for q in reversed(rows) if q.gang_id not in queued}.values())[::-1]
        self._index_ledger("g", [(q.gang_id, q.pool) for q in new])
        # admitted_ms 0, not null: admission's condition then fails on a row that does not exist.
        self._write(insert_cql("pool_ledger", _LEDGER_GANG),
                    [(q.pool, "g", q.gang_id, q.priority, q.seq, json_text(q.gang), q.not_before_ms, 0, TS)
                     for q in new])

    def _gangs(self, admitted: bool, pools: list[str] | None = None) -> list[QueuedGang]:
        rows = self._ledger("g", f"{QUEUED_COLS.replace('gang_id', 'id')}, admitted_ms", pools)
        return sorted((queued_from_row(r) for r in rows if bool(r[6]) == admitted), key=lambda q: q.seq)

    def queued_gangs(self, pools: list[str] | None = None) -> list[QueuedGang]:
        return self._gangs(admitted=False, pools=distinct(pools))

    def unsent_admissions(self) -> list[QueuedGang]:
        return self._gangs(admitted=True)

    def admissions_sent(self, gang_ids: list[str]) -> None:
        self.unqueue_gangs(gang_ids)

    def unqueue_gangs(self, gang_ids: list[str]) -> None:
        pools = self._pools_of("g", gang_ids)
        tx = self._tx()
        if tx is not None:
            tx.unqueued |= set(pools)
        self._write("DELETE FROM pool_ledger USING TIMESTAMP ? WHERE pool = ? AND kind = 'g' AND id = ?",
                    [(TS, pool, g) for g, pool in pools.items()])
        self._write("DELETE FROM ledger_index USING TIMESTAMP ? WHERE id = ?", [(TS, f"g:{g}") for g in pools])

    def admit_gangs(self, gang_ids: list[str], allocations: list[Allocation],
                    unqueued: Sequence[Allocation] = ()) -> set[str]:
        """Per pool, one conditional batch on its partition: its gangs are marked admitted and
        their tasks charged, only if every one is still queued; both or neither. One Paxos round
        per pool (a round per gang would contend for the same partition). If a gang was taken
        meanwhile, the pool's batch applies nothing and goes again without it. The unqueued
        charges go first, as plain writes: no condition holds them."""
        if unqueued:
            self.add_allocations(list(unqueued))
        pools = self._pools_of("g", gang_ids)
        by_gang: dict[str, list[Allocation]] = {}
        for a in allocations:
            by_gang.setdefault(a.gang_id, []).append(a)
        by_pool: dict[str, list[str]] = {}
        for g in dict.fromkeys(gang_ids):
            if g in pools:
                by_pool.setdefault(pools[g], []).append(g)
        with self.transaction():  # the charges' index rows first: found by task id once written
            self._index_ledger("a", [(a.task_id, a.pool) for gs in by_pool.values() for g in gs
                                     for a in by_gang.get(g, [])])
        taken: set[str] = set()
        while by_pool:
            batches = [(self._admission(pool, gs, by_gang), ()) for pool, gs in by_pool.items()]
            results = execute_concurrent(self.session, batches, CONCURRENCY, raise_on_first_error=True)
            retry: dict[str, list[str]] = {}
            for (pool, gs), (_ok, result) in zip(list(by_pool.items()), results, strict=True):
                if result.one()[0]:
                    taken.update(gs)
                    continue
                still = {r[0] for r in self._rows_serial(
                    "SELECT id FROM pool_ledger WHERE pool = ? AND kind = 'g' AND id IN ? AND admitted_ms = 0 "
                    "ALLOW FILTERING", (pool, gs))}
                if still and still != set(gs):
                    retry[pool] = [g for g in gs if g in still]
            by_pool = retry
        return taken

    def _admission(self, pool: str, gangs: list[str], by_gang: dict[str, list[Allocation]]) -> BatchStatement:
        mark = self._p("UPDATE pool_ledger SET admitted_ms = ? WHERE pool = ? AND kind = 'g' AND id = ? "
                       "IF admitted_ms = 0")
        charge = self._p(f"INSERT INTO pool_ledger ({_LEDGER_ALLOCATION}) VALUES ({', '.join('?' * 14)})")
        now = int(time.time() * 1000)
        batch = BatchStatement(BatchType.UNLOGGED)  # one partition: applied whole or not at all
        for g in gangs:
            batch.add(mark, (now, pool, g))
            for a in by_gang.get(g, []):
                if a.pool == pool:
                    batch.add(charge, _allocation_params(a))
        return batch
