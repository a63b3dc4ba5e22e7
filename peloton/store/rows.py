"""Columns and row conversions every SQL backend shares: one place that maps rows to named fields."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from types import EllipsisType
from typing import Any

import orjson

from peloton.auth.tokens import TokenRow
from peloton.store.base import Allocation, JobRow, Launch, QueuedGang, TaskRow


def json_text(value: object) -> str:
    """JSON text of a column (orjson: task specs and gangs are written and read per status, and
    the standard library's json was a tenth of the job manager's time)."""
    return orjson.dumps(value).decode()

TASK_COLS = (
    "job_id, instance, run_id, task_id, pool, gang_id, state, spec, max_failures, failures, "
    "host_id, reason, message, exit_code, signal, updated_ms, health"
)
JOB_COLS = (
    "job_id, name, pool, type, state, instance_count, priority, preemptible, placement_strategy, "
    "owner, config_text, created_ms, updated_ms, completed_ms, revocable, config_version, rollout"
)
LAUNCH_COLS = "task_id, job_id, instance, run_id, host_id, cpu, mem_mb, disk_mb, gpu, launched_ms, ended_ms"
ALLOCATION_COLS = (
    "task_id, pool, gang_id, cpu, mem_mb, disk_mb, gpu, admitted_ms, priority, preemptible, revocable, controller"
)
QUEUED_COLS = "gang_id, pool, priority, seq, gang, not_before_ms"
# The same columns without the spec (a NULL in its place), for reads that do not need it.
TASK_COLS_NO_SPEC = TASK_COLS.replace(" spec,", " NULL,")
EVENT_COLS = ("task_id", "job_id", "instance", "run_id", "state", "reason", "exit_code", "timestamp_ms", "host_id",
              "message")


# A batch's events of one job are kept as one row (task_event_batches): a row per event would
# cost the job manager several times as much CPU (a run has about seven events).
# Each event is its EVENT_COLS but the job id, which is the row's.
_EVENT_COLS_IN_BATCH = tuple(c for c in EVENT_COLS if c != "job_id")


def event_batches(events: Sequence[tuple]) -> list[tuple[str, bytes]]:
    """(job id, its events as JSON) for each job the events are of, in the order first seen."""
    by_job: dict[str, list] = {}
    for e in events:
        by_job.setdefault(e[1], []).append((e[0], *e[2:]))
    return [(job_id, orjson.dumps(evs)) for job_id, evs in by_job.items()]


def events_of_batch(job_id: str, text: bytes | str) -> list[dict]:
    out = []
    for e in orjson.loads(text):
        event = dict(zip(_EVENT_COLS_IN_BATCH, e, strict=True))
        event["job_id"] = job_id
        out.append(event)
    return out


def task_from_row(row: Sequence[Any]) -> TaskRow:
    return TaskRow(
        job_id=row[0], instance=row[1], run_id=row[2], task_id=row[3], pool=row[4], gang_id=row[5],
        state=row[6], spec=orjson.loads(row[7]) if row[7] is not None else None, max_failures=row[8],
        failures=row[9], host_id=row[10] or "", reason=row[11] or "", message=row[12] or "", exit_code=row[13],
        signal=row[14], updated_ms=row[15] or 0, health=row[16] or "",
    )


def task_params(t: TaskRow, spec_text: str | None | EllipsisType = ...) -> tuple:
    """A task's TASK_COLS values; its spec as `spec_text` when given (None: a SQL NULL)."""
    return (
        t.job_id, t.instance, t.run_id, t.task_id, t.pool, t.gang_id, t.state,
        json_text(t.spec) if spec_text is ... else spec_text,
        t.max_failures, t.failures, t.host_id, t.reason, t.message, t.exit_code, t.signal, t.updated_ms, t.health,
    )


# A launch spec's fields that name its run: the task row's own columns say the same.
SPEC_IDENTITY = ("task_id", "job_id", "instance", "run_id")


def spec_template(spec: dict) -> dict:
    """What a run's launch spec says beside its identity: what a job's alike tasks share."""
    return {k: v for k, v in spec.items() if k not in SPEC_IDENTITY}


def spec_of(t: TaskRow, template: dict) -> dict:
    """The launch spec of a task whose job's alike tasks share `template` (identity first, as
    launch_spec orders it)."""
    return {"task_id": t.task_id, "job_id": t.job_id, "instance": t.instance, "run_id": t.run_id, **template}


# What a status moves of a task's run (its spec, pool and limits stay): `update_task_runs`.
RUN_COLS = ("run_id", "task_id", "gang_id", "state", "failures", "host_id", "reason", "message", "exit_code", "signal",
            "updated_ms", "health")


# Of those, what a status moves when the run stays the same: no new run id, task id or gang id, so
# the task-id index is left alone (an UPDATE rewrites the index of every column it sets).
STATE_COLS = RUN_COLS[3:]
# ... and when it stays on the same host too: the host index is left alone as well. Most statuses
# are such a step (READY and PLACING, then every step after the one that names the host: PLACED or,
# for a gang that waited for no host, LAUNCHING); SQLite updating host_id to the value it
# had costs more per row.
STEP_COLS = tuple(c for c in STATE_COLS if c != "host_id")


def moved_cols(same_run: bool = False, same_host: bool = False) -> tuple[str, ...]:
    """The columns update_task_runs writes: STEP_COLS, STATE_COLS or RUN_COLS."""
    return STEP_COLS if same_host else STATE_COLS if same_run else RUN_COLS


def alike_moves(tasks: list[TaskRow], cols: tuple[str, ...]) -> dict[tuple, list[int]]:
    """The tasks whose values of `cols` are the same, job by job: (those values, then the job id)
    -> their instances. A batch moves many runs of a job to the same step at the same time, and
    SQLite writes them 2.2 times as fast with one statement per job and step as with one per row.
    A task given twice is written with its last values."""
    values = _MOVE_VALUES[cols]
    last = {(t.job_id, t.instance): values(t) for t in tasks}
    out: dict[tuple, list[int]] = {}
    for (_, instance), v in last.items():
        out.setdefault(v, []).append(instance)
    return out


_MOVE_VALUES = {cols: attrgetter(*cols, "job_id") for cols in (RUN_COLS, STATE_COLS, STEP_COLS)}


def job_from_row(row: Sequence[Any]) -> JobRow:
    return JobRow(
        job_id=row[0], name=row[1], pool=row[2], type=row[3], state=row[4], instance_count=row[5],
        priority=row[6], preemptible=bool(row[7]), placement_strategy=row[8], owner=row[9],
        config_text=row[10], created_ms=row[11], updated_ms=row[12], completed_ms=row[13],
        revocable=bool(row[14]), config_version=row[15] or 1, rollout=orjson.loads(row[16]) if row[16] else None,
    )


def job_params(j: JobRow) -> tuple:
    return (j.job_id, j.name, j.pool, j.type, j.state, j.instance_count, j.priority, bool(j.preemptible),
            j.placement_strategy, j.owner, j.config_text, j.created_ms, j.updated_ms, j.completed_ms,
            bool(j.revocable), j.config_version, json_text(j.rollout) if j.rollout else None)


def job_update_params(j: JobRow) -> tuple:
    """What an update of a job may change, then its id."""
    return (j.state, j.updated_ms, j.completed_ms, j.instance_count, j.config_text, j.config_version,
            json_text(j.rollout) if j.rollout else None, j.job_id)


def allocation_from_row(row: Sequence[Any]) -> Allocation:
    return Allocation(task_id=row[0], pool=row[1], gang_id=row[2], cpu=row[3], mem_mb=row[4], disk_mb=row[5],
                      gpu=row[6], admitted_ms=row[7], priority=row[8] or 0,
                      preemptible=True if row[9] is None else bool(row[9]), revocable=bool(row[10]),
                      controller=bool(row[11]))


def launch_from_row(row: Sequence[Any]) -> Launch:
    return Launch(task_id=row[0], job_id=row[1], instance=row[2], run_id=row[3], host_id=row[4], cpu=row[5],
                  mem_mb=row[6], disk_mb=row[7], gpu=row[8], launched_ms=row[9], ended_ms=row[10])


def allocation_params(a: Allocation) -> tuple:
    return (a.task_id, a.pool, a.gang_id, a.cpu, a.mem_mb, a.disk_mb, a.gpu, a.admitted_ms, a.priority,
            bool(a.preemptible), bool(a.revocable), bool(a.controller))


def queued_from_row(row: Sequence[Any]) -> QueuedGang:
    return QueuedGang(gang_id=row[0], pool=row[1], priority=row[2], seq=row[3], gang=orjson.loads(row[4]),
                      not_before_ms=row[5] or 0, admitted_ms=(row[6] or 0) if len(row) > 6 else 0)


def queued_params(q: QueuedGang) -> tuple:
    return (q.gang_id, q.pool, q.priority, q.seq, json_text(q.gang), q.not_before_ms)


def launch_params(r: Launch) -> tuple:
    return (r.task_id, r.job_id, r.instance, r.run_id, r.host_id, r.cpu, r.mem_mb, r.disk_mb, r.gpu,
            r.launched_ms, r.ended_ms)


def pool_prefix(path: str) -> str:
    """What the paths of the pools below `path` start with: "/a/" below "/a"; below "/" lies
    every other path ("/")."""
    return path.rstrip("/") + "/"


def pool_path_range(path: str) -> tuple[str, str]:
    """(low, high), both excluded: the paths below `path` in byte order, for stores that order
    text so (SQLite's BINARY, Cassandra's text): after its prefix, before the prefix with its
    last "/" made "0", the character after it."""
    prefix = pool_prefix(path)
    return prefix, prefix[:-1] + "0"


def placeholders(cols: str, mark: str) -> str:
    """'?, ?, ?' (SQLite) or '%s, %s, %s' (PostgreSQL): one per column."""
    return ", ".join([mark] * (cols.count(",") + 1))


def job_filters(mark: str, states: list[str] | None = None, pool: str | None = None, owner: str | None = None,
                name: str | None = None, created_since_ms: int | None = None) -> tuple[str, list]:
    """A WHERE clause (or '') and its parameters for `list_jobs`' filters."""
    clauses: list[str] = []
    params: list[object] = []
    if states:
        clauses.append(f"state IN ({', '.join([mark] * len(states))})")
        params.extend(states)
    for column, value in (("pool", pool), ("owner", owner), ("name", name)):
        if value:
            clauses.append(f"{column} = {mark}")
            params.append(value)
    if created_since_ms is not None:
        clauses.append(f"created_ms >= {mark}")
        params.append(created_since_ms)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


TOKEN_COLUMNS = "token_id, secret_hash, user_name, groups, admin, created_ms, revoked_ms"


def token_params(row: TokenRow) -> tuple:
    return (row.token_id, row.secret_hash, row.user, json_text(list(row.groups)), bool(row.admin), row.created_ms,
            row.revoked_ms)


def token_from_row(row: Sequence[Any]) -> TokenRow:
    return TokenRow(row[0], row[1], row[2], tuple(orjson.loads(row[3])), bool(row[4]), row[5], row[6])


def update_params(u: dict) -> tuple:
    """An update workflow's row: its keys as columns, the whole of it as JSON."""
    return (u["update_id"], u["job_id"], u["state"], json_text(u), u["created_ms"])
