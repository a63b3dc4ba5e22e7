"""Reads for people (pelotonctl, dashboards) and the pools table the control plane owns: the
QueryStore role's own part (its job, task, queue and charge reads are the other mixins')."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from peloton.store.base import JobRow
from peloton.store.cassandra.session import TS, CassandraSession, day_of, insert_cql
from peloton.store.rows import EVENT_COLS, json_text, pool_path_range


class QueriesMixin(CassandraSession):
    """Listings read the jobs through JobsMixin, as a transaction sees them."""

    if TYPE_CHECKING:
        def get_jobs(self, job_ids: list[str]) -> dict[str, JobRow]: ...
        def _active(self) -> list[tuple[str, str]]: ...

    # -- pools ------------------------------------------------------------------------------
    def put_pool(self, path: str, config: dict) -> None:
        self._write(insert_cql("pools", "bucket, path, config, updated_ms"),
                    [(0, path, json_text(config), config.get("updated_ms", 0), TS)])

    def get_pool(self, path: str) -> dict | None:
        rows = self._rows("SELECT config FROM pools WHERE bucket = 0 AND path = ?", (path,))
        return orjson.loads(rows[0][0]) if rows else None

    def list_pools(self) -> dict[str, dict]:
        return {p: orjson.loads(c) for p, c in self._rows("SELECT path, config FROM pools WHERE bucket = 0")}

    def has_pools_below(self, path: str) -> bool:
        low, high = pool_path_range(path)  # a range of the clustering column (text: UTF-8 byte order)
        return bool(self._rows("SELECT path FROM pools WHERE bucket = 0 AND path > ? AND path < ? LIMIT 1",
                               (low, high)))

    def delete_pool(self, path: str) -> bool:
        if self.get_pool(path) is None:
            return False
        self._write("DELETE FROM pools USING TIMESTAMP ? WHERE bucket = 0 AND path = ?", [(TS, path)])
        return True

    def lock_pool_tree(self) -> None:
        tx = self._tx()
        if tx is None:
            return  # nothing to hold it across: a change outside a transaction is one write
        owner = self._lock("pool-tree")
        tx.on_end.append(lambda: self._unlock("pool-tree", owner))

    def pools_with_jobs(self) -> set[str]:
        return {pool for _job, pool in self._active()}

    # -- jobs, their events and updates, launches per instance ---------------------------
    def list_jobs(self, limit: int = 100, *, states: list[str] | None = None, pool: str | None = None,
                  owner: str | None = None, name: str | None = None, created_since_ms: int | None = None,
                  oldest_first: bool = False) -> list[JobRow]:
        """Day by day from the newest, each day's jobs newest first, until `limit` match (from the
        oldest, each day's oldest first, with oldest_first); only the days from created_since_ms on."""
        out: list[JobRow] = []
        order = "ASC" if oldest_first else "DESC"
        since = -1 if created_since_ms is None else created_since_ms
        for (day,) in self._rows(f"SELECT day FROM job_days WHERE bucket = 0 AND day >= ? ORDER BY day {order}",
                                 (day_of(max(since, 0)),)):
            ids = [r[0] for r in self._rows(f"SELECT job_id FROM jobs_by_day WHERE day = ? AND created_ms >= ? "
                                            f"ORDER BY created_ms {order}", (day, since))]
            for k in range(0, len(ids), 200):
                jobs = self.get_jobs(ids[k:k + 200])
                for j in ids[k:k + 200]:
                    job = jobs.get(j)
                    if job is None or (states and job.state not in states) or (pool and job.pool != pool) or \
                            (owner and job.owner != owner) or (name and job.name != name):
                        continue
                    out.append(job)
                    if len(out) >= limit:
                        return out
        return out

    def task_events(self, job_id: str) -> list[dict]:
        rows = self._rows(f"SELECT {', '.join(EVENT_COLS)} FROM task_events WHERE job_id = ?", (job_id,))
        return [dict(zip(EVENT_COLS, r, strict=True)) for r in rows]

    def updates_of_job(self, job_id: str) -> list[dict]:
        ids = [r[0] for r in self._rows("SELECT update_id FROM updates_by_job WHERE job_id = ?", (job_id,))]
        bodies = dict(self._rows_in("SELECT update_id, body FROM updates WHERE update_id IN ?", ids))
        return [orjson.loads(bodies[u]) for u in ids if u in bodies]

    def launch_counts(self, job_id: str) -> dict[int, int]:
        counts: dict[int, int] = {}
        for (instance,) in self._rows("SELECT instance FROM launches_by_job WHERE job_id = ?", (job_id,)):
            counts[instance] = counts.get(instance, 0) + 1
        return counts
