"""Tasks (a job's in its partition; by state and by host in index tables checked when read)
and their events: the rest of the JobStore role, and the task reads of the QueryStore's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from cassandra.concurrent import execute_concurrent
from cassandra.query import UNSET_VALUE

from peloton.model.states import TASK_TERMINAL, UNLAUNCHED
from peloton.store.base import INDEXED_STATES, TaskEvent, TaskRow, require_indexed
from peloton.store.cassandra.session import CONCURRENCY, TS, CassandraSession, bucket_of, insert_cql
from peloton.store.cassandra_schema import BUCKETS
from peloton.store.rows import EVENT_COLS, TASK_COLS, moved_cols, task_from_row, task_params

# A task's columns but its spec, for reads that do not need it (_light puts None in its place).
TASK_COLS_LIGHT = TASK_COLS.replace(" spec,", "")
_END_COLS = ("exit_code", "signal")  # set once, at a run's end


def _unset_nulls(params: tuple) -> tuple:
    return tuple(UNSET_VALUE if v is None else v for v in params)


def _light(row: Sequence) -> TaskRow:
    """A task from TASK_COLS_LIGHT: its spec not read (None)."""
    return task_from_row((*row[:7], None, *row[7:]))


class TasksMixin(CassandraSession):
    """Reads see the transaction's own tasks: a whole row it saved, or the columns it set."""

    # -- tasks ------------------------------------------------------------------------------
    def _task_writes(self, tasks: list[TaskRow], full: bool, same_run: bool = False, new: bool = False) -> None:
        """Task rows (whole, or the columns a status moves) and then their index rows.

        A null written is a tombstone that every read of the job's tasks reads back (an exit code
        and a signal at each status: 2,000 per 1,000 rows, past Cassandra's warning). Where the column
        can hold nothing to clear, a None is left unset: a new task's, and the exit code and
        signal of a run moving between states that are not its end."""
        if full:
            rows = [(*task_params(t), TS) for t in tasks]
            self._write(insert_cql("tasks", TASK_COLS), [_unset_nulls(r) for r in rows] if new else rows)
        else:
            cols = moved_cols(same_run)
            sets = ", ".join(f"{c} = ?" for c in cols)
            self._write(f"UPDATE tasks USING TIMESTAMP ? SET {sets} WHERE job_id = ? AND instance = ?",
                        [(TS, *(UNSET_VALUE if same_run and v is None and c in _END_COLS
                                and t.state not in TASK_TERMINAL else v
                                for c in cols for v in (getattr(t, c),)), t.job_id, t.instance)
                         for t in tasks])
        self._write(insert_cql("tasks_by_state", "state, bucket, job_id, instance"),
                    [(t.state, bucket_of(t.job_id), t.job_id, t.instance, TS) for t in tasks
                     if t.state in INDEXED_STATES])
        self._write(insert_cql("tasks_by_host", "host_id, job_id, instance"),
                    [(t.host_id, t.job_id, t.instance, TS) for t in tasks if t.host_id])

    def save_tasks(self, tasks: list[TaskRow]) -> None:
        tx = self._tx()
        if tx is not None:
            for t in tasks:
                tx.tasks[(t.job_id, t.instance)] = dataclasses.replace(t)
        self._task_writes(tasks, full=True)

    def update_task_runs(self, tasks: list[TaskRow], same_run: bool = False, same_host: bool = False) -> None:
        # same_host: writing host_id again costs Cassandra nothing more, so it is written as same_run.
        tx = self._tx()
        if tx is not None:
            cols = moved_cols(same_run)
            for t in tasks:
                key = (t.job_id, t.instance)
                change = {c: getattr(t, c) for c in cols}
                held = tx.tasks.get(key)
                if isinstance(held, TaskRow):
                    for c, v in change.items():
                        setattr(held, c, v)
                else:
                    tx.tasks[key] = {**(held or {}), **change}
        self._task_writes(tasks, full=False, same_run=same_run)

    def _seen(self, job_id: str, instance: int, stored: TaskRow | None) -> TaskRow | None:
        """A stored task as this transaction sees it."""
        tx = self._tx()
        if tx is None:
            return stored
        held = tx.tasks.get((job_id, instance))
        if held is None:
            return None if job_id in tx.dropped_jobs else stored
        if isinstance(held, TaskRow):
            return dataclasses.replace(held)
        if stored is None:
            return None
        seen = dataclasses.replace(stored)
        for c, v in held.items():
            setattr(seen, c, v)
        return seen

    def _job_tasks(self, job_ids: list[str], spec: bool = True) -> dict[str, list[TaskRow]]:
        """Every task of these jobs, by instance, as this transaction sees them."""
        out: dict[str, dict[int, TaskRow]] = {j: {} for j in job_ids}
        if job_ids:
            cols = TASK_COLS if spec else TASK_COLS_LIGHT
            for row in self._rows_each(f"SELECT {cols} FROM tasks WHERE job_id = ?", [(j,) for j in job_ids]):
                if row[4] is not None:  # a pool: a task saved, not a row only an UPDATE made
                    out[row[0]][row[1]] = task_from_row(row) if spec else _light(row)
        tx = self._tx()
        if tx is not None:
            wanted = set(job_ids)
            for (j, i), held in tx.tasks.items():
                if j in wanted and isinstance(held, TaskRow) and i not in out[j]:
                    out[j][i] = dataclasses.replace(held)
            for j in job_ids:
                out[j] = {i: seen for i, t in out[j].items() if (seen := self._seen(j, i, t)) is not None}
        return {j: [by[i] for i in sorted(by)] for j, by in out.items()}

    def tasks_of_job(self, job_id: str) -> list[TaskRow]:
        return self._job_tasks([job_id])[job_id]

    def tasks_by_instance(self, keys: list[tuple[str, int]], spec: bool = True) -> dict[tuple[str, int], TaskRow]:
        if not keys:
            return {}
        by_job: dict[str, list[int]] = {}
        for j, i in keys:
            by_job.setdefault(j, []).append(i)
        rows = self._rows_each(f"SELECT {TASK_COLS if spec else TASK_COLS_LIGHT} FROM tasks WHERE job_id = ? "
                               "AND instance IN ?", [(j, sorted(set(ins))) for j, ins in by_job.items()])
        stored = {(r[0], r[1]): task_from_row(r) if spec else _light(r) for r in rows if r[4] is not None}
        out: dict[tuple[str, int], TaskRow] = {}
        for key in dict.fromkeys(keys):
            seen = self._seen(key[0], key[1], stored.get(key))
            if seen is not None:
                if not spec:
                    seen.spec = None
                out[key] = seen
        return out

    def unlaunched_tasks_of_jobs(self, job_ids: list[str]) -> list[TaskRow]:
        return [t for tasks in self._job_tasks(sorted(set(job_ids))).values() for t in tasks if t.state in UNLAUNCHED]

    def task_state_counts(self, job_ids: list[str]) -> dict[str, dict[str, int]]:
        """Read as (instance, state) pairs alone: asked for every active job on every deadline
        check, and by dashboards, where reading whole rows costs Cassandra most of its CPU."""
        job_ids = list(dict.fromkeys(job_ids))
        states: dict[str, dict[int, str]] = {j: {} for j in job_ids}
        if job_ids:
            for j, i, state, pool in self._rows_each("SELECT job_id, instance, state, pool FROM tasks WHERE job_id = ?",
                                                     [(j,) for j in job_ids]):
                if pool is not None:
                    states[j][i] = state
        tx = self._tx()
        if tx is not None:
            for j in tx.dropped_jobs & set(job_ids):
                states[j] = {}
            for (j, i), held in tx.tasks.items():
                if j not in states:
                    continue
                if isinstance(held, TaskRow):
                    states[j][i] = held.state
                elif i in states[j] and "state" in held:
                    states[j][i] = held["state"]
        out: dict[str, dict[str, int]] = {}
        for j, by_instance in states.items():
            counts: dict[str, int] = {}
            for state in by_instance.values():
                counts[state] = counts.get(state, 0) + 1
            out[j] = counts
        return out

    def _indexed(self, table: str, column: str, index: list[tuple], key_cols: str,
                 key_of: Callable[[str, str, int], tuple]) -> list[TaskRow]:
        """The tasks an index table's rows point at, as this transaction sees them. `index` rows
        are (value of `column`, job id, instance); an index row whose task is gone, or whose
        `column` moved on, is deleted (its key: key_of(row), in `key_cols`) as of the write time
        of that column, so an index row written after it survives."""
        found = self._checked(index, column)
        now = self._clock.take()
        stale = []
        for value, j, i in index:
            t, written = found.get((j, i), (None, now))
            if t is None or getattr(t, column) != value:
                stale.append((written, *key_of(value, j, i)))
        if stale:
            stmt = self._p(f"DELETE FROM {table} USING TIMESTAMP ? WHERE {key_cols}")
            execute_concurrent(self.session, [(stmt, r) for r in stale], CONCURRENCY, raise_on_first_error=False)
        return self._seen_all(found)

    def _checked(self, index: list[tuple], column: str) -> dict[tuple[str, int], tuple[TaskRow, int]]:
        """The tasks index rows point at (and those this transaction wrote, whose index rows are
        not written yet), with the write time of `column`."""
        tx = self._tx()
        keys = sorted({(r[1], r[2]) for r in index} | (set(tx.tasks) if tx is not None else set()))
        by_job: dict[str, list[int]] = {}
        for j, i in keys:
            by_job.setdefault(j, []).append(i)
        found: dict[tuple[str, int], tuple[TaskRow, int]] = {}
        if by_job:
            for row in self._rows_each(f"SELECT {TASK_COLS}, writetime({column}) FROM tasks WHERE job_id = ? "
                                       "AND instance IN ?", [(j, ins) for j, ins in by_job.items()]):
                if row[4] is not None:
                    found[(row[0], row[1])] = (task_from_row(row), row[-1] or 0)
        return found

    def _seen_all(self, found: dict[tuple[str, int], tuple[TaskRow, int]]) -> list[TaskRow]:
        """The tasks found, and those this transaction made, as it sees them."""
        tx = self._tx()
        keys = set(found) | ({k for k, held in tx.tasks.items() if isinstance(held, TaskRow)} if tx else set())
        stored = {k: t for k, (t, _w) in found.items()}
        return [t for k in keys if (t := self._seen(k[0], k[1], stored.get(k))) is not None]

    def tasks_in_states(self, states: list[str], updated_before_ms: int, limit: int = 1000) -> list[TaskRow]:
        require_indexed(states, "Cassandra")
        index = self._rows_each("SELECT state, job_id, instance FROM tasks_by_state WHERE state = ? AND bucket = ?",
                                [(s, b) for s in states for b in range(BUCKETS)])
        tasks = self._indexed("tasks_by_state", "state", index,
                              "state = ? AND bucket = ? AND job_id = ? AND instance = ?",
                              lambda state, j, i: (state, bucket_of(j), j, i))
        hits = [t for t in tasks if t.state in states and t.updated_ms < updated_before_ms]
        return sorted(hits, key=lambda t: t.updated_ms)[:limit]

    def tasks_on_hosts(self, host_ids: list[str], states: list[str]) -> list[TaskRow]:
        index = self._rows_each("SELECT host_id, job_id, instance FROM tasks_by_host WHERE host_id = ?",
                                [(h,) for h in dict.fromkeys(host_ids)])
        tasks = self._indexed("tasks_by_host", "host_id", index, "host_id = ? AND job_id = ? AND instance = ?",
                              lambda host, j, i: (host, j, i))
        hosts = set(host_ids)
        return sorted((t for t in tasks if t.host_id in hosts and t.state in states),
                      key=lambda t: (t.job_id, t.instance))

    # -- task events ------------------------------------------------------------------------
    def record_task_events(self, events: Sequence[TaskEvent]) -> None:
        if not events:
            return
        first = self._event_seq.take(len(events))
        cols = ("job_id", "seq", *(c for c in EVENT_COLS if c != "job_id"))
        self._write(insert_cql("task_events", cols),
                    [(e[1], first + n, *(v for c, v in zip(EVENT_COLS, e, strict=True) if c != "job_id"), TS)
                     for n, e in enumerate(events)])
