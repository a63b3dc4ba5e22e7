"""Jobs, tasks, task events, update workflows and config versions: the job manager's tables."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import orjson

from peloton.model.states import JOB_TERMINAL, UNLAUNCHED
from peloton.store.base import INDEXED_STATES, JobRow, TaskEvent, TaskRow, require_indexed
from peloton.store.rows import (
    JOB_COLS,
    RUN_COLS,
    STATE_COLS,
    STEP_COLS,
    TASK_COLS,
    TASK_COLS_NO_SPEC,
    alike_moves,
    event_batches,
    job_from_row,
    job_params,
    job_update_params,
    json_text,
    moved_cols,
    placeholders,
    spec_of,
    spec_template,
    task_from_row,
    task_params,
    update_params,
)
from peloton.store.sql.base import MAIN, SqlBase

# The partial index of tasks in INDEXED_STATES (migration 0001) has this condition, as equalities
# joined by OR: with an IN list SQLite evaluated the list as a table at every row an UPDATE wrote,
# which cost more than the index saved. 300,000 status updates of 50,000 tasks: 1.8 s of CPU with
# no such index, 3.1 with (state, updated_ms) over every state, 3.6 partial with IN, 2.4 partial
# with OR. tasks_in_states repeats it word for word: SQLite uses a partial index only then.
WAITING = "(" + " OR ".join(f"state = '{s}'" for s in INDEXED_STATES) + ")"
UNLAUNCHED_LIST = "(" + ", ".join(f"'{s}'" for s in UNLAUNCHED) + ")"
TERMINAL_LIST = "(" + ", ".join(f"'{s}'" for s in sorted(JOB_TERMINAL)) + ")"
NOT_TERMINAL = "state NOT IN ('SUCCEEDED', 'FAILED', 'KILLED', 'DELETED')"
_TASK_UPSERT = ", ".join(f"{c} = excluded.{c}" for c in TASK_COLS.replace(" ", "").split(",")[2:])


def _moves(cols: tuple[str, ...]) -> tuple[str, str]:
    """update_task_runs' statements for one set of columns: a run alone, and alike runs of a job."""
    sets = ", ".join(f"{c} = ?" for c in cols)
    return (f"UPDATE tasks SET {sets} WHERE job_id = ? AND instance = ?",
            f"UPDATE tasks SET {sets} WHERE job_id = ? AND instance {{list}}")


_MOVE_NAMES = {RUN_COLS: "run", STATE_COLS: "state", STEP_COLS: "step"}
# The names of each set's statements in JobsSql.q: (a run alone, alike runs of a job).
_MOVE_STATEMENTS = {cols: (f"move_{name}_one", f"move_{name}_many") for cols, name in _MOVE_NAMES.items()}
# What goes with a job; its own row goes last (whether it was there says whether it was deleted).
_DELETED_WITH_JOB = ("task_events", "task_event_batches", "tasks", "job_task_specs", "updates", "job_configs")
_DELETE_STATEMENTS = tuple(f"delete_job_{table}" for table in _DELETED_WITH_JOB)


def new_task_rows(tasks: list[TaskRow]) -> tuple[list[tuple], list[tuple[str, str]]]:
    """New tasks' rows, and (job id, spec) for each job whose alike tasks share one spec. A job's
    tasks are mostly alike but for their identity (expand_job), and their spec is most of a
    task row: written in every row, it spread 100 rows over 17 pages, which each step of the
    runs rewrote. So a task whose spec is its job's first task's but for the identity (which its
    own columns say) holds none, and reads take it from job_task_specs; any other keeps its own.
    Only new jobs' tasks: a spec written later (a retry, an update) stays in its row."""
    first: dict[str, dict | None] = {}
    shared: dict[str, dict] = {}
    rows = []
    for t in tasks:
        if t.job_id not in first:
            first[t.job_id] = spec_template(t.spec) if isinstance(t.spec, dict) else None
        template = first[t.job_id]
        if template is not None and spec_of(t, template) == t.spec:
            rows.append(task_params(t, None))
            shared[t.job_id] = template
        else:
            rows.append(task_params(t))
    return rows, [(job_id, json_text(template)) for job_id, template in shared.items()]


class JobsSql(SqlBase):
    SQL = {
        "jobs_known": "SELECT job_id FROM jobs WHERE job_id {list}",
        "insert_job": f"INSERT INTO jobs ({JOB_COLS}) VALUES ({placeholders(JOB_COLS, '?')}) "
                      "ON CONFLICT DO NOTHING{returning:job_id}",
        "insert_task": f"INSERT INTO tasks ({TASK_COLS}) VALUES ({placeholders(TASK_COLS, '?')})",
        "save_task": f"INSERT INTO tasks ({TASK_COLS}) VALUES ({placeholders(TASK_COLS, '?')}) "
                     f"ON CONFLICT (job_id, instance) DO UPDATE SET {_TASK_UPSERT}",
        "save_shared_spec": "INSERT INTO job_task_specs (job_id, spec) VALUES (?, ?) "
                            "ON CONFLICT (job_id) DO UPDATE SET spec = excluded.spec",
        "shared_specs": "SELECT job_id, spec FROM job_task_specs WHERE job_id {list}",
        "get_jobs": f"SELECT {JOB_COLS} FROM jobs WHERE job_id {{list}}",
        "active_jobs": f"SELECT {JOB_COLS} FROM jobs WHERE {NOT_TERMINAL}",
        "update_job": "UPDATE jobs SET state = ?, updated_ms = ?, completed_ms = ?, instance_count = ?, "
                      "config_text = ?, config_version = ?, rollout = ? WHERE job_id = ?",
        "tasks_of_job": f"SELECT {TASK_COLS} FROM tasks WHERE job_id = ? ORDER BY instance",
        # The keys as a table joined to tasks: each key is looked up by the primary key.
        "tasks_by_key": f"SELECT {TASK_COLS} FROM {{keys}} JOIN tasks ON job_id = k.kj AND instance = k.ki",
        "tasks_by_key_no_spec": f"SELECT {TASK_COLS_NO_SPEC} FROM {{keys}} JOIN tasks ON job_id = k.kj "
                                "AND instance = k.ki",
        "tasks_in_states": f"SELECT {TASK_COLS} FROM tasks WHERE {WAITING} AND state {{list}} AND updated_ms < ? "
                           "ORDER BY updated_ms LIMIT ?",
        # `host_id != ''` word for word: the partial index serves only a query that says so.
        "tasks_on_hosts": f"SELECT {TASK_COLS} FROM tasks WHERE host_id {{list}} AND host_id != '' "
                          "AND state {list} ORDER BY job_id, instance",
        "unlaunched_tasks": f"SELECT {TASK_COLS} FROM tasks WHERE state IN {UNLAUNCHED_LIST} AND job_id {{list}} "
                            "ORDER BY job_id, instance",
        "task_state_counts": "SELECT job_id, state, COUNT(*) FROM tasks WHERE job_id {list} GROUP BY job_id, state",
        "record_events": "INSERT INTO task_event_batches (job_id, events) VALUES (?, ?)",
        "ended_jobs": f"SELECT job_id FROM jobs WHERE completed_ms < ? AND state IN {TERMINAL_LIST} "
                      "ORDER BY completed_ms LIMIT ?",
        "delete_job": "DELETE FROM jobs WHERE job_id = ?",
        "job_deleted": "INSERT INTO deleted_jobs (job_id, deleted_ms) VALUES (?, ?) "
                       "ON CONFLICT (job_id) DO UPDATE SET deleted_ms = excluded.deleted_ms",
        "save_update": "INSERT INTO updates (update_id, job_id, state, body, created_ms) VALUES (?, ?, ?, ?, ?) "
                       "ON CONFLICT (update_id) DO UPDATE SET job_id = excluded.job_id, state = excluded.state, "
                       "body = excluded.body, created_ms = excluded.created_ms",
        "get_update": "SELECT body FROM updates WHERE update_id = ?",
        "save_job_config": "INSERT INTO job_configs (job_id, version, config_text, created_ms) VALUES (?, ?, ?, ?) "
                           "ON CONFLICT DO NOTHING",
        "job_config": "SELECT config_text FROM job_configs WHERE job_id = ? AND version = ?",
        **{name: sql for cols, names in _MOVE_STATEMENTS.items()
           for name, sql in zip(names, _moves(cols), strict=True)},
        **{name: f"DELETE FROM {table} WHERE job_id = ?"
           for name, table in zip(_DELETE_STATEMENTS, _DELETED_WITH_JOB, strict=True)},
    }

    def create_jobs(self, jobs: list[JobRow], tasks: list[TaskRow]) -> set[str]:
        if not jobs:
            return set()
        with self.transaction():
            created = self._insert_new(MAIN, self.q.jobs_known, self.q.insert_job, [job_params(j) for j in jobs])
            rows, shared = new_task_rows([t for t in tasks if t.job_id in created])
            self._many(MAIN, self.q.save_shared_spec, shared)
            self._many(MAIN, self.q.insert_task, rows)
        return created

    def _tasks(self, rows: Iterable[tuple]) -> list[TaskRow]:
        """Task rows read with their specs: a row that holds none takes its job's shared one."""
        out = [task_from_row(r) for r in rows]
        jobs = {t.job_id for t in out if t.spec is None}
        if jobs:
            shared = {job_id: orjson.loads(text) for job_id, text in
                      self._rows(MAIN, self.q.shared_specs, (self.dialect.list_param(sorted(jobs)),))}
            for t in out:
                if t.spec is None and t.job_id in shared:
                    t.spec = spec_of(t, shared[t.job_id])
        return out

    def get_jobs(self, job_ids: list[str]) -> dict[str, JobRow]:
        return {r[0]: job_from_row(r) for r in self._rows(MAIN, self.q.get_jobs, (self.dialect.list_param(job_ids),))}

    def active_jobs(self) -> list[JobRow]:
        return [job_from_row(r) for r in self._rows(MAIN, self.q.active_jobs)]

    def update_jobs(self, jobs: list[JobRow]) -> None:
        self._many(MAIN, self.q.update_job, [job_update_params(j) for j in jobs])

    def tasks_of_job(self, job_id: str) -> list[TaskRow]:
        return self._tasks(self._rows(MAIN, self.q.tasks_of_job, (job_id,)))

    def tasks_by_instance(self, keys: list[tuple[str, int]], spec: bool = True) -> dict[tuple[str, int], TaskRow]:
        if not keys:
            return {}
        unique = list(dict.fromkeys(keys))
        if spec:
            found = self._tasks(self._rows(MAIN, self.q.tasks_by_key, self.dialect.keys_params(unique)))
        else:
            found = [task_from_row(r) for r in self._rows(MAIN, self.q.tasks_by_key_no_spec,
                                                          self.dialect.keys_params(unique))]
        return {(t.job_id, t.instance): t for t in found}

    def tasks_in_states(self, states: list[str], updated_before_ms: int, limit: int = 1000) -> list[TaskRow]:
        require_indexed(states, self.dialect.name)
        return self._tasks(self._rows(MAIN, self.q.tasks_in_states,
                                      (self.dialect.list_param(states), updated_before_ms, limit)))

    def tasks_on_hosts(self, host_ids: list[str], states: list[str]) -> list[TaskRow]:
        return self._tasks(self._rows(MAIN, self.q.tasks_on_hosts,
                                      (self.dialect.list_param(host_ids), self.dialect.list_param(states))))

    def unlaunched_tasks_of_jobs(self, job_ids: list[str]) -> list[TaskRow]:
        return self._tasks(self._rows(MAIN, self.q.unlaunched_tasks, (self.dialect.list_param(job_ids),)))

    def save_tasks(self, tasks: list[TaskRow]) -> None:
        self._many(MAIN, self.q.save_task, [task_params(t) for t in tasks])

    def update_task_runs(self, tasks: list[TaskRow], same_run: bool = False, same_host: bool = False) -> None:
        if not tasks:
            return
        cols = moved_cols(same_run, same_host)
        (one_sql, many_sql), to_list = _MOVE_STATEMENTS[cols], self.dialect.list_param
        apart = self.dialect.single_keys_apart
        one, many = [], []  # a run alone: its instance; alike runs of a job: theirs as a list
        for values, instances in alike_moves(tasks, cols).items():
            if apart and len(instances) == 1:
                one.append((*values, instances[0]))
            else:
                many.append((*values, to_list(instances)))
        with self.transaction():
            if one:
                self._many(MAIN, getattr(self.q, one_sql), one)
            if many:
                # A list keeps one statement text for any number of instances, and each row is
                # still found by its primary key.
                self._many(MAIN, getattr(self.q, many_sql), many)

    def task_state_counts(self, job_ids: list[str]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {j: {} for j in job_ids}
        for job_id, state, n in self._rows(MAIN, self.q.task_state_counts, (self.dialect.list_param(job_ids),)):
            out[job_id][state] = n
        return out

    def record_task_events(self, events: Sequence[TaskEvent]) -> None:
        self._many(MAIN, self.q.record_events, event_batches(events))

    def delete_job(self, job_id: str, at_ms: int) -> bool:
        with self.transaction():
            for name in _DELETE_STATEMENTS:
                self._count(MAIN, getattr(self.q, name), (job_id,))
            if not self._count(MAIN, self.q.delete_job, (job_id,)):
                return False
            self._count(MAIN, self.q.job_deleted, (job_id, at_ms))
            return True

    def ended_jobs(self, completed_before_ms: int, limit: int) -> list[str]:
        return [r[0] for r in self._rows(MAIN, self.q.ended_jobs, (completed_before_ms, limit))]

    def save_updates(self, updates: list[dict]) -> None:
        self._many(MAIN, self.q.save_update, [update_params(u) for u in updates])

    def get_update(self, update_id: str) -> dict | None:
        rows = self._rows(MAIN, self.q.get_update, (update_id,))
        return orjson.loads(rows[0][0]) if rows else None

    def save_job_configs(self, rows: list[tuple[str, int, str, int]]) -> None:
        self._many(MAIN, self.q.save_job_config, rows)

    def job_config(self, job_id: str, version: int) -> str | None:
        rows = self._rows(MAIN, self.q.job_config, (job_id, version))
        return rows[0][0] if rows else None

