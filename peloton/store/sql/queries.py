"""Reads for people (pelotonctl, the API, dashboards) and the pools table the control plane owns."""

from __future__ import annotations

import json

import orjson

from peloton.store.base import JobRow
from peloton.store.rows import EVENT_COLS, JOB_COLS, events_of_batch, job_filters, job_from_row, pool_path_range
from peloton.store.sql.base import LAUNCHES, MAIN, SqlBase
from peloton.store.sql.jobs import NOT_TERMINAL

# The one order on every backend: newest first, ties by id (Cassandra's clustering), or its reverse.
_NEWEST_FIRST, _OLDEST_FIRST = "created_ms DESC, job_id ASC", "created_ms ASC, job_id DESC"


class QueriesSql(SqlBase):
    SQL = {
        "get_job": f"SELECT {JOB_COLS} FROM jobs WHERE job_id = ?",
        # task_events: one row per event, as stores made before the batches hold them (older first)
        "task_events": f"SELECT {', '.join(EVENT_COLS)} FROM task_events WHERE job_id = ? ORDER BY {{seq}}",
        "task_event_batches": "SELECT events FROM task_event_batches WHERE job_id = ? ORDER BY {seq}",
        "launch_counts": "SELECT instance, COUNT(*) FROM launches WHERE job_id = ? GROUP BY instance",
        "updates_of_job": "SELECT body FROM updates WHERE job_id = ? ORDER BY created_ms DESC, update_id",
        "put_pool": "INSERT INTO pools (path, config, updated_ms) VALUES (?, ?, ?) "
                    "ON CONFLICT (path) DO UPDATE SET config = excluded.config, updated_ms = excluded.updated_ms",
        "get_pool": "SELECT config FROM pools WHERE path = ?",
        "list_pools": "SELECT path, config FROM pools ORDER BY path",
        # By byte order (pool_path_range), whatever the database's collation.
        "pools_below": "SELECT 1 FROM pools WHERE path{binary} > ? AND path{binary} < ? LIMIT 1",
        "delete_pool": "DELETE FROM pools WHERE path = ?",
        "pools_with_jobs": f"SELECT DISTINCT pool FROM jobs WHERE {NOT_TERMINAL}",
    }

    def get_job(self, job_id: str) -> JobRow | None:
        rows = self._rows(MAIN, self.q.get_job, (job_id,))
        return job_from_row(rows[0]) if rows else None

    def list_jobs(self, limit: int = 100, *, states: list[str] | None = None, pool: str | None = None,
                  owner: str | None = None, name: str | None = None, created_since_ms: int | None = None,
                  oldest_first: bool = False) -> list[JobRow]:
        # Built per call: the filters given make the statement (a person's query, not a stage's batch).
        where, params = job_filters(self.dialect.mark, states, pool, owner, name, created_since_ms)
        order = _OLDEST_FIRST if oldest_first else _NEWEST_FIRST
        return [job_from_row(r) for r in self._rows(
            MAIN, f"SELECT {JOB_COLS} FROM jobs{where} ORDER BY {order} LIMIT {self.dialect.mark}", (*params, limit))]

    def task_events(self, job_id: str) -> list[dict]:
        out = [dict(zip(EVENT_COLS, r, strict=True)) for r in self._rows(MAIN, self.q.task_events, (job_id,))]
        for (events,) in self._rows(MAIN, self.q.task_event_batches, (job_id,)):
            out.extend(events_of_batch(job_id, events))
        return out

    def launch_counts(self, job_id: str) -> dict[int, int]:
        return dict(self._rows(LAUNCHES, self.q.launch_counts, (job_id,)))

    def updates_of_job(self, job_id: str) -> list[dict]:
        return [orjson.loads(r[0]) for r in self._rows(MAIN, self.q.updates_of_job, (job_id,))]

    def put_pool(self, path: str, config: dict) -> None:
        self._count(MAIN, self.q.put_pool, (path, json.dumps(config), config.get("updated_ms", 0)))

    def get_pool(self, path: str) -> dict | None:
        rows = self._rows(MAIN, self.q.get_pool, (path,))
        return orjson.loads(rows[0][0]) if rows else None

    def list_pools(self) -> dict[str, dict]:
        # orjson: 3.8 ms for 1,000 pools against 11.3 with json (every admit batch and API call reads them)
        return {p: orjson.loads(c) for p, c in self._rows(MAIN, self.q.list_pools)}

    def has_pools_below(self, path: str) -> bool:
        return bool(self._rows(MAIN, self.q.pools_below, pool_path_range(path)))

    def delete_pool(self, path: str) -> bool:
        return self._count(MAIN, self.q.delete_pool, (path,)) > 0

    def pools_with_jobs(self) -> set[str]:
        return {r[0] for r in self._rows(MAIN, self.q.pools_with_jobs)}
