"""Allocations and pool queues: entitle's tables (the ALLOCATIONS part)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from peloton.store.base import Allocation, QueuedGang
from peloton.store.rows import (
    ALLOCATION_COLS,
    QUEUED_COLS,
    allocation_from_row,
    allocation_params,
    placeholders,
    queued_from_row,
    queued_params,
)
from peloton.store.sql.base import ALLOCATIONS, SqlBase

_ALLOCATION_UPSERT = ", ".join(f"{c} = excluded.{c}" for c in ALLOCATION_COLS.replace(" ", "").split(",")[1:])
_HELD = f"SELECT {ALLOCATION_COLS} FROM allocations WHERE released_ms IS NULL"
_QUEUED = f"SELECT {QUEUED_COLS} FROM queued_gangs WHERE admitted_ms IS NULL"


class AllocationsSql(SqlBase):
    SQL = {
        "held": _HELD,
        "held_in_pools": f"{_HELD} AND pool {{list}}",
        # A run charged again is held again (its release forgotten).
        "add_allocation": f"INSERT INTO allocations ({ALLOCATION_COLS}) VALUES ({placeholders(ALLOCATION_COLS, '?')}) "
                          f"ON CONFLICT (task_id) DO UPDATE SET {_ALLOCATION_UPSERT}, released_ms = NULL",
        # `+`: without it SQLite walks the release index over every held allocation and tests each
        # against the list, rather than finding the listed ones by their key.
        "release": "UPDATE allocations SET released_ms = ? WHERE task_id {list} AND +released_ms IS NULL",
        "remove": "DELETE FROM allocations WHERE task_id {list}",
        "allocation_states": "SELECT task_id, released_ms FROM allocations WHERE task_id {list}",
        "forget_released": "DELETE FROM allocations WHERE task_id IN (SELECT task_id FROM allocations "
                           "WHERE released_ms < ? LIMIT ?)",
        "queue_gang": f"INSERT INTO queued_gangs ({QUEUED_COLS}) VALUES ({placeholders(QUEUED_COLS, '?')}) "
                      "ON CONFLICT DO NOTHING",
        "queued": f"{_QUEUED} ORDER BY seq",
        "queued_in_pools": f"{_QUEUED} AND pool {{list}} ORDER BY seq",
        "unsent": f"SELECT {QUEUED_COLS}, admitted_ms FROM queued_gangs WHERE admitted_ms IS NOT NULL ORDER BY seq",
        "unqueue": "DELETE FROM queued_gangs WHERE gang_id {list}",
        "admit": "UPDATE queued_gangs SET admitted_ms = ? WHERE gang_id {list} AND admitted_ms IS NULL "
                 "RETURNING gang_id",
    }

    def allocations(self, pools: list[str] | None = None) -> list[Allocation]:
        if pools is None:
            return [allocation_from_row(r) for r in self._rows(ALLOCATIONS, self.q.held)]
        return [allocation_from_row(r) for r in self._rows(ALLOCATIONS, self.q.held_in_pools,
                                                           (self.dialect.list_param(pools),))]

    def add_allocations(self, rows: list[Allocation]) -> None:
        self._many(ALLOCATIONS, self.q.add_allocation, [allocation_params(a) for a in rows])

    def release_allocations(self, task_ids: list[str], released_ms: int) -> None:
        if task_ids:
            self._count(ALLOCATIONS, self.q.release, (released_ms, self.dialect.list_param(task_ids)))

    def remove_allocations(self, task_ids: list[str]) -> None:
        if task_ids:
            self._count(ALLOCATIONS, self.q.remove, (self.dialect.list_param(task_ids),))

    def allocation_states(self, task_ids: list[str]) -> dict[str, str]:
        rows = self._rows(ALLOCATIONS, self.q.allocation_states, (self.dialect.list_param(task_ids),))
        return {t: "held" if released is None else "released" for t, released in rows}

    def forget_released_allocations(self, before_ms: int, limit: int) -> int:
        return self._count(ALLOCATIONS, self.q.forget_released, (before_ms, limit))

    def queue_gangs(self, rows: list[QueuedGang]) -> None:
        self._many(ALLOCATIONS, self.q.queue_gang, [queued_params(q) for q in rows])

    def queued_gangs(self, pools: list[str] | None = None) -> list[QueuedGang]:
        if pools is None:
            return [queued_from_row(r) for r in self._rows(ALLOCATIONS, self.q.queued)]
        return [queued_from_row(r) for r in self._rows(ALLOCATIONS, self.q.queued_in_pools,
                                                       (self.dialect.list_param(pools),))]

    def unsent_admissions(self) -> list[QueuedGang]:
        return [queued_from_row(r) for r in self._rows(ALLOCATIONS, self.q.unsent)]

    def admissions_sent(self, gang_ids: list[str]) -> None:
        self.unqueue_gangs(gang_ids)

    def unqueue_gangs(self, gang_ids: list[str]) -> None:
        if gang_ids:
            self._count(ALLOCATIONS, self.q.unqueue, (self.dialect.list_param(gang_ids),))

    def admit_gangs(self, gang_ids: list[str], allocations: list[Allocation],
                    unqueued: Sequence[Allocation] = ()) -> set[str]:
        with self.transaction():
            if unqueued:
                self.add_allocations(list(unqueued))
            if not gang_ids:
                return set()
            taken = {r[0] for r in self._rows(ALLOCATIONS, self.q.admit,
                                              (int(time.time() * 1000), self.dialect.list_param(gang_ids)))}
            self.add_allocations([a for a in allocations if a.gang_id in taken])
            return taken
