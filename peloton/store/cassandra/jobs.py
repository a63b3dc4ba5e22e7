"""Jobs (their rows, the index of those not ended, the days that have jobs), their update
workflows and config versions: what the job manager owns of the JobStore role."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import orjson

from peloton.model.states import JOB_TERMINAL
from peloton.store.base import JobRow, TaskRow
from peloton.store.cassandra.session import (
    CLAIM,
    JOB_ROW,
    TS,
    CassandraSession,
    bucket_of,
    day_of,
    insert_cql,
)
from peloton.store.cassandra_schema import BUCKETS
from peloton.store.rows import JOB_COLS, job_from_row, job_params, json_text

# The columns of a job that an update may change.
_JOB_UPDATE_COLS = ("state", "updated_ms", "completed_ms", "instance_count", "config_text", "config_version", "rollout")


class JobsMixin(CassandraSession):
    """A job's row is written with its tasks (TasksMixin) and claimed after them."""

    if TYPE_CHECKING:
        def _task_writes(self, tasks: list[TaskRow], full: bool, same_run: bool = False,
                         new: bool = False) -> None: ...

    # -- jobs -------------------------------------------------------------------------------
    def _job_writes(self, jobs: list[JobRow], created: bool) -> None:
        """A job's row (whole when created, what may change when updated) and its index rows."""
        if created:
            self._write(insert_cql("jobs", JOB_COLS), [(*job_params(j), TS) for j in jobs], JOB_ROW)
            self._write(insert_cql("jobs_by_day", "day, created_ms, job_id"),
                        [(day_of(j.created_ms), j.created_ms, j.job_id, TS) for j in jobs], JOB_ROW)
            self._write(insert_cql("job_days", "bucket, day"),
                        [(0, day, TS) for day in {day_of(j.created_ms) for j in jobs}], JOB_ROW)
        else:
            sets = ", ".join(f"{c} = ?" for c in _JOB_UPDATE_COLS)
            self._write(f"UPDATE jobs USING TIMESTAMP ? SET {sets} WHERE job_id = ?",
                        [(TS, j.state, j.updated_ms, j.completed_ms, j.instance_count, j.config_text,
                          j.config_version, json_text(j.rollout) if j.rollout else None, j.job_id) for j in jobs],
                        JOB_ROW)
        self._write(insert_cql("active_jobs", "bucket, job_id, pool"),
                    [(bucket_of(j.job_id), j.job_id, j.pool, TS) for j in jobs if j.state not in JOB_TERMINAL], JOB_ROW)
        self._write("DELETE FROM active_jobs USING TIMESTAMP ? WHERE bucket = ? AND job_id = ?",
                    [(TS, bucket_of(j.job_id), j.job_id) for j in jobs if j.state in JOB_TERMINAL], JOB_ROW)

    def create_jobs(self, jobs: list[JobRow], tasks: list[TaskRow]) -> set[str]:
        known = self.get_jobs([j.job_id for j in jobs])
        new: dict[str, JobRow] = {}
        for j in jobs:
            if j.job_id not in known and j.job_id not in new:
                new[j.job_id] = j
        if not new:
            return set()
        mine = [t for t in tasks if t.job_id in new]
        tx = self._tx()
        if tx is not None:
            # One stage instance owns a job's commands: the claim is a row of the batch.
            self._task_writes(mine, full=True, new=True)
            self._job_writes(list(new.values()), created=True)
            self._write(insert_cql("job_claims", "job_id, at_ms"), [(j, int(time.time() * 1000), TS) for j in new],
                        CLAIM)
            for j in new.values():
                tx.jobs[j.job_id] = dataclasses.replace(j)
            for t in mine:
                tx.tasks[(t.job_id, t.instance)] = dataclasses.replace(t)
            return set(new)
        # Outside a batch two callers may race: write the effects (the same rows whoever wins),
        # then claim each job once.
        with self.transaction():
            self._task_writes(mine, full=True, new=True)
            self._job_writes(list(new.values()), created=True)
        at = int(time.time() * 1000)
        applied = self._applied_each("INSERT INTO job_claims (job_id, at_ms) VALUES (?, ?) IF NOT EXISTS",
                                     [(j, at) for j in new])
        return {j for j, ok in zip(new, applied, strict=True) if ok}

    def get_job(self, job_id: str) -> JobRow | None:
        return self.get_jobs([job_id]).get(job_id)

    def get_jobs(self, job_ids: list[str]) -> dict[str, JobRow]:
        tx = self._tx()
        out: dict[str, JobRow] = {}
        ask: list[str] = []
        for j in dict.fromkeys(job_ids):
            if tx is not None and j in tx.jobs:
                held = tx.jobs[j]
                if held is not None:
                    out[j] = dataclasses.replace(held)
            else:
                ask.append(j)
        if ask:
            for row in self._rows_in(f"SELECT {JOB_COLS} FROM jobs WHERE job_id IN ?", ask):
                if row[2] is not None:  # a pool: a row created, not one only an update wrote
                    out[row[0]] = job_from_row(row)
        return out

    def _active(self) -> list[tuple[str, str]]:
        """(job id, pool) of every job not ended, from the index, with this transaction's changes."""
        rows = self._rows_each("SELECT job_id, pool FROM active_jobs WHERE bucket = ?", [(b,) for b in range(BUCKETS)])
        found = dict(rows)
        tx = self._tx()
        if tx is not None:
            for j, job in tx.jobs.items():
                if job is None or job.state in JOB_TERMINAL:
                    found.pop(j, None)
                else:
                    found[j] = job.pool
        return sorted(found.items())

    def active_jobs(self) -> list[JobRow]:
        ids = [j for j, _pool in self._active()]
        jobs = self.get_jobs(ids)
        return [jobs[j] for j in ids if j in jobs and jobs[j].state not in JOB_TERMINAL]

    def update_jobs(self, jobs: list[JobRow]) -> None:
        tx = self._tx()
        if tx is not None:
            for j in jobs:
                if j.job_id in tx.jobs and tx.jobs[j.job_id] is None:
                    continue  # deleted in this transaction
                tx.jobs[j.job_id] = dataclasses.replace(j)
        self._job_writes(jobs, created=False)

    def delete_job(self, job_id: str, at_ms: int) -> bool:
        job = self.get_job(job_id)
        if job is None:
            return False
        updates = [r[0:2] for r in self._rows("SELECT created_ms, update_id FROM updates_by_job WHERE job_id = ?",
                                              (job_id,))]
        with self.transaction():
            tx = self._tx()
            assert tx is not None  # transaction() holds one
            tx.jobs[job_id] = None
            tx.dropped_jobs.add(job_id)
            for key in [k for k in tx.tasks if k[0] == job_id]:
                del tx.tasks[key]
            for table in ("tasks", "task_events", "job_configs", "updates_by_job", "launches_by_job"):
                self._write(f"DELETE FROM {table} USING TIMESTAMP ? WHERE job_id = ?", [(TS, job_id)])
            self._write("DELETE FROM updates USING TIMESTAMP ? WHERE update_id = ?", [(TS, u) for _c, u in updates])
            self._write("DELETE FROM jobs_by_day USING TIMESTAMP ? WHERE day = ? AND created_ms = ? AND job_id = ?",
                        [(TS, day_of(job.created_ms), job.created_ms, job_id)])
            self._write("DELETE FROM active_jobs USING TIMESTAMP ? WHERE bucket = ? AND job_id = ?",
                        [(TS, bucket_of(job_id), job_id)], JOB_ROW)
            self._write("DELETE FROM jobs USING TIMESTAMP ? WHERE job_id = ?", [(TS, job_id)], JOB_ROW)
            self._write("DELETE FROM job_claims USING TIMESTAMP ? WHERE job_id = ?", [(TS, job_id)], CLAIM)
            self._write(insert_cql("deleted_jobs", "job_id, deleted_ms"), [(job_id, at_ms, TS)], CLAIM)
        return True

    def ended_jobs(self, completed_before_ms: int, limit: int) -> list[str]:
        """A job ended before a time was created before it: the days up to that one, oldest first."""
        out: list[str] = []
        for (day,) in self._rows("SELECT day FROM job_days WHERE bucket = 0 AND day <= ? ORDER BY day ASC",
                                 (day_of(completed_before_ms),)):
            ids = [r[0] for r in self._rows("SELECT job_id FROM jobs_by_day WHERE day = ? AND created_ms < ?",
                                            (day, completed_before_ms))]
            for k in range(0, len(ids), 200):
                for job in self.get_jobs(ids[k:k + 200]).values():
                    if job.state in JOB_TERMINAL and job.completed_ms is not None and \
                            job.completed_ms < completed_before_ms:
                        out.append(job.job_id)
                        if len(out) >= limit:
                            return out
        return out

    def deleted_jobs(self, job_ids: list[str]) -> dict[str, int]:
        return dict(self._rows_in("SELECT job_id, deleted_ms FROM deleted_jobs WHERE job_id IN ?", job_ids))

    # -- update workflows and config versions ------------------------------------------------
    def save_updates(self, updates: list[dict]) -> None:
        tx = self._tx()
        if tx is not None:
            tx.updates.update({u["update_id"]: orjson.loads(json_text(u)) for u in updates})
        self._write(insert_cql("updates", "update_id, job_id, state, body, created_ms"),
                    [(u["update_id"], u["job_id"], u["state"], json_text(u), u["created_ms"], TS) for u in updates])
        self._write(insert_cql("updates_by_job", "job_id, created_ms, update_id"),
                    [(u["job_id"], u["created_ms"], u["update_id"], TS) for u in updates])

    def get_update(self, update_id: str) -> dict | None:
        tx = self._tx()
        if tx is not None and update_id in tx.updates:
            return orjson.loads(json_text(tx.updates[update_id]))
        rows = self._rows("SELECT body FROM updates WHERE update_id = ?", (update_id,))
        return orjson.loads(rows[0][0]) if rows else None

    def save_job_configs(self, rows: list[tuple[str, int, str, int]]) -> None:
        """A version stored stays as it was (one writer per job: its job manager)."""
        tx = self._tx()
        new = [r for r in rows if self.job_config(r[0], r[1]) is None]
        new = list({(r[0], r[1]): r for r in reversed(new)}.values())
        if tx is not None:
            tx.configs.update({(j, v): text for j, v, text, _at in new})
        self._write(insert_cql("job_configs", "job_id, version, config_text, created_ms"), [(*r, TS) for r in new])

    def job_config(self, job_id: str, version: int) -> str | None:
        tx = self._tx()
        if tx is not None and (job_id, version) in tx.configs:
            return tx.configs[(job_id, version)]
        rows = self._rows("SELECT config_text FROM job_configs WHERE job_id = ? AND version = ?", (job_id, version))
        return rows[0][0] if rows else None

