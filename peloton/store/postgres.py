"""PostgreSQL backend, for stages on several machines (psycopg 3 with a connection pool).

Every statement is parametrised. Where two instances could race, the database decides:
create_jobs and claim_launches insert with ON CONFLICT DO NOTHING and return what they
inserted, so a job is created once and a task run launched once whoever asks. The schema is
created and migrated by the project: schema_version holds the version, and migrations run under
an advisory lock so two processes starting at once do not both apply them.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager

import orjson
import psycopg
from psycopg_pool import ConnectionPool

from peloton.model.states import JOB_TERMINAL, UNLAUNCHED
from peloton.store.base import (
    CLAIMS_KEPT_MS,
    Allocation,
    JobRow,
    Launch,
    QueuedGang,
    StorageGateway,
    TaskRow,
)
from peloton.auth.tokens import TokenRow
from peloton.store.rows import (
    pool_prefix,
    TOKEN_COLUMNS,
    ALLOCATION_COLS,
    EVENT_COLS,
    event_batches,
    events_of_batch,
    JOB_COLS,
    LAUNCH_COLS,
    QUEUED_COLS,
    TASK_COLS,
    TASK_COLS_NO_SPEC,
    allocation_from_row,
    allocation_params,
    job_filters,
    job_from_row,
    job_update_params,
    json_text,
    job_params,
    launch_from_row,
    launch_params,
    placeholders,
    queued_from_row,
    moved_cols,
    alike_moves,
    queued_params,
    task_from_row,
    task_params,
    token_from_row,
    token_params,
    update_params,
)

# Migrations in order; the list index + 1 is the schema version each one brings.
MIGRATIONS = [
    """
    CREATE TABLE pools (path TEXT PRIMARY KEY, config TEXT NOT NULL, updated_ms BIGINT NOT NULL DEFAULT 0);
    CREATE TABLE jobs (
        job_id TEXT PRIMARY KEY, name TEXT, pool TEXT, type TEXT, state TEXT, instance_count INTEGER,
        priority INTEGER, preemptible BOOLEAN, placement_strategy TEXT, owner TEXT, config_text TEXT,
        created_ms BIGINT, updated_ms BIGINT, completed_ms BIGINT);
    CREATE INDEX jobs_by_state ON jobs (state);
    CREATE TABLE tasks (
        job_id TEXT NOT NULL, instance INTEGER NOT NULL, run_id INTEGER NOT NULL, task_id TEXT NOT NULL,
        pool TEXT, gang_id TEXT, state TEXT, spec TEXT, max_failures INTEGER, failures INTEGER,
        host_id TEXT, reason TEXT, message TEXT, exit_code INTEGER, signal INTEGER, updated_ms BIGINT,
        PRIMARY KEY (job_id, instance));
    CREATE INDEX tasks_by_task_id ON tasks (task_id);
    CREATE TABLE task_events (
        seq BIGSERIAL PRIMARY KEY, task_id TEXT, job_id TEXT, instance INTEGER, run_id INTEGER, state TEXT,
        reason TEXT, exit_code INTEGER, timestamp_ms BIGINT);
    CREATE INDEX task_events_by_job ON task_events (job_id);
    CREATE TABLE allocations (
        task_id TEXT PRIMARY KEY, pool TEXT, gang_id TEXT, cpu DOUBLE PRECISION, mem_mb DOUBLE PRECISION,
        disk_mb DOUBLE PRECISION, gpu DOUBLE PRECISION, admitted_ms BIGINT);
    CREATE TABLE launches (
        task_id TEXT PRIMARY KEY, job_id TEXT, instance INTEGER, run_id INTEGER, host_id TEXT,
        cpu DOUBLE PRECISION, mem_mb DOUBLE PRECISION, disk_mb DOUBLE PRECISION, gpu DOUBLE PRECISION,
        launched_ms BIGINT, ended_ms BIGINT, final_status TEXT);
    CREATE INDEX launches_by_host ON launches (host_id, ended_ms);
    CREATE INDEX launches_by_job ON launches (job_id);
    """,
    # 2: ended runs are kept as released (entitle recognises a redelivered demand for one).
    """
    ALTER TABLE allocations ADD COLUMN released_ms BIGINT;
    CREATE INDEX allocations_released ON allocations (released_ms);
    """,
    # 3: entitle keeps its pools' queues, and what admission and preemption need of each run;
    # job control: commands claimed once, a job's config version and the rollout in progress.
    """
    ALTER TABLE allocations ADD COLUMN priority INTEGER, ADD COLUMN preemptible BOOLEAN,
        ADD COLUMN revocable BOOLEAN, ADD COLUMN controller BOOLEAN;
    ALTER TABLE jobs ADD COLUMN revocable BOOLEAN, ADD COLUMN config_version INTEGER, ADD COLUMN rollout TEXT;
    ALTER TABLE task_events ADD COLUMN host_id TEXT, ADD COLUMN message TEXT;
    CREATE TABLE job_commands (command_id TEXT PRIMARY KEY, job_id TEXT, at_ms BIGINT);
    CREATE INDEX tasks_by_state ON tasks (state, updated_ms);
    CREATE TABLE queued_gangs (
        gang_id TEXT PRIMARY KEY, pool TEXT, priority INTEGER, seq BIGINT, gang TEXT, not_before_ms BIGINT);
    """,
    # 4: hosts in maintenance (UP hosts have no row), kept by the host manager of their shard.
    """
    CREATE TABLE host_maintenance (host_id TEXT PRIMARY KEY, state TEXT NOT NULL, updated_ms BIGINT);
    """,
    # 5: an admitted gang stays (marked) until its admission was sent: the outbox a new owner
    # of the pool sends again if the last one died between the store and the broker.
    """
    ALTER TABLE queued_gangs ADD COLUMN admitted_ms BIGINT;
    """,
    # 6: the API's tokens, their secrets hashed (peloton.auth.tokens).
    """
    CREATE TABLE tokens (
        token_id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, user_name TEXT NOT NULL, groups TEXT NOT NULL,
        admin BOOLEAN NOT NULL, created_ms BIGINT NOT NULL, revoked_ms BIGINT);
    """,
    # 7: why the job manager refused a command, for the caller to ask (the API's command status).
    """
    CREATE TABLE refused_commands (
        command_id TEXT PRIMARY KEY, job_id TEXT, pool TEXT, kind TEXT, reason TEXT, at_ms BIGINT);
    """,
    # 8: update workflows, whole, and every config version a job accepted.
    """
    CREATE TABLE updates (
        update_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, state TEXT, body TEXT NOT NULL, created_ms BIGINT);
    CREATE INDEX updates_by_job ON updates (job_id, created_ms);
    CREATE TABLE job_configs (
        job_id TEXT NOT NULL, version INTEGER NOT NULL, config_text TEXT NOT NULL, created_ms BIGINT,
        PRIMARY KEY (job_id, version));
    """,
    # 9: the runs on a host, for drains (the job manager moves them under each job's budget).
    """
    CREATE INDEX tasks_by_host ON tasks (host_id);
    """,
    # 10: a run's health, as its health check last said.
    """
    ALTER TABLE tasks ADD COLUMN health TEXT;
    """,
    # 11: a batch's events of one job in one row (rows.event_batches); task_events keeps the older.
    """
    CREATE TABLE task_event_batches (seq BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL, events BYTEA NOT NULL);
    CREATE INDEX task_event_batches_by_job ON task_event_batches (job_id);
    """,
    # 12: commands' claims and refusals are forgotten by age (base.CLAIMS_KEPT_MS).
    """
    CREATE INDEX job_commands_by_time ON job_commands (at_ms);
    CREATE INDEX refused_commands_by_time ON refused_commands (at_ms);
    """,
    # 13: a deleted job's id stays taken, and ended runs' launches are forgotten, both after
    # base.CLAIMS_KEPT_MS.
    """
    CREATE TABLE deleted_jobs (job_id TEXT PRIMARY KEY, deleted_ms BIGINT NOT NULL);
    CREATE INDEX deleted_jobs_by_time ON deleted_jobs (deleted_ms);
    CREATE INDEX launches_by_end ON launches (ended_ms);
    """,
    # 14: jobs that ended are deleted past their retention (settings.job_retention_s).
    """
    CREATE INDEX jobs_by_completion ON jobs (completed_ms);
    """,
    # 15: no production query reads launches by job (only tests count a job's: launch_counts),
    # and each claim wrote the index.
    """
    DROP INDEX IF EXISTS launches_by_job;
    """,
    # 16: nothing reads tasks by task id (a task id is its job, instance and run), and runs are
    # read by host only once they have one: neither index is written for a new task any more.
    """
    DROP INDEX IF EXISTS tasks_by_task_id;
    DROP INDEX IF EXISTS tasks_by_host;
    CREATE INDEX tasks_placed_by_host ON tasks (host_id) WHERE host_id <> '';
    """,
]
_MIGRATION_LOCK = 0x70656C6F  # any constant shared by every process of the project
_POOL_TREE_LOCK = 0x706F6F6C


def _s(cols: str) -> str:
    return placeholders(cols, "%s")


class PostgresStore(StorageGateway):
    def __init__(self, url: str, min_size: int = 1, max_size: int = 4, timeout: float = 5.0):
        self.url = url
        # One plain connection first: a server that is away fails here at once, with its reason
        # (the pool would only say it timed out).
        psycopg.connect(url, connect_timeout=3).close()
        # autocommit: a statement outside transaction() commits at once; transaction() groups.
        # A server that is away is noticed in seconds: connecting gives up after 3 s, waiting
        # for a pooled connection after `timeout`, and a connection whose server stopped
        # answering mid-query is dropped by TCP after 10 s (keepalives, user timeout), so a
        # command answers and a stage sees SIGTERM in seconds, not minutes.
        self.pool = ConnectionPool(url, min_size=min_size, max_size=max_size, timeout=timeout,
                                   kwargs={"autocommit": True, "connect_timeout": 3, "keepalives": 1,
                                           "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 2,
                                           "tcp_user_timeout": 10_000},
                                   open=True, name="peloton-store")
        self._local = threading.local()  # the connection of the transaction this thread is in
        self.pool.wait(timeout)
        self._migrate()

    def _migrate(self) -> None:
        with self.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            current = row[0] or 0
            for version, sql in enumerate(MIGRATIONS[current:], start=current + 1):
                conn.execute(sql)
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))

    @property
    def schema_version(self) -> int:
        with self._conn() as conn:
            return conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]

    @contextmanager
    def transaction(self):
        """One transaction for everything inside, on one connection; nested calls join it."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.pool.connection() as conn, conn.transaction():
            self._local.conn = conn
            try:
                yield conn
            finally:
                self._local.conn = None

    @contextmanager
    def _conn(self):
        """The current transaction's connection, or a pooled one for a single statement."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
        else:
            with self.pool.connection() as conn:
                yield conn

    def _all(self, sql: str, params=()) -> list[tuple]:
        with self._conn() as conn:
            return conn.execute(sql, params).fetchall()

    def _count(self, sql: str, params=()) -> int:
        """A statement's row count (the rows a DELETE removed); for writes whose rows nobody reads
        (a RETURNING clause only to satisfy _all fetched every one)."""
        with self._conn() as conn:
            return conn.execute(sql, params).rowcount

    def _many(self, sql: str, rows: list[tuple]) -> None:
        if rows:
            with self._conn() as conn, conn.cursor() as cur:
                cur.executemany(sql, rows)

    # -- pools ------------------------------------------------------------------------------
    def put_pool(self, path: str, config: dict) -> None:
        self._many("INSERT INTO pools (path, config, updated_ms) VALUES (%s, %s, %s) ON CONFLICT (path) DO UPDATE "
                   "SET config = excluded.config, updated_ms = excluded.updated_ms",
                   [(path, json.dumps(config), config.get("updated_ms", 0))])

    def get_pool(self, path: str) -> dict | None:
        rows = self._all("SELECT config FROM pools WHERE path = %s", (path,))
        return orjson.loads(rows[0][0]) if rows else None

    def list_pools(self) -> dict[str, dict]:
        return {p: orjson.loads(c) for p, c in self._all("SELECT path, config FROM pools ORDER BY path")}

    def has_pools_below(self, path: str) -> bool:
        # By prefix, not by range: PostgreSQL orders text by the database's collation.
        prefix = pool_prefix(path)
        return bool(self._all("SELECT 1 FROM pools WHERE left(path, %s) = %s AND path <> %s LIMIT 1",
                              (len(prefix), prefix, path)))

    def delete_pool(self, path: str) -> bool:
        return bool(self._count("DELETE FROM pools WHERE path = %s", (path,)))

    def lock_pool_tree(self) -> None:
        self._all("SELECT pg_advisory_xact_lock(%s)", (_POOL_TREE_LOCK,))

    def pools_with_jobs(self) -> set[str]:
        q = "SELECT DISTINCT pool FROM jobs WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'KILLED', 'DELETED')"
        return {r[0] for r in self._all(q)}

    # -- jobs and tasks ---------------------------------------------------------------------
    def create_jobs(self, jobs: list[JobRow], tasks: list[TaskRow]) -> set[str]:
        if not jobs:
            return set()
        with self.transaction() as conn, conn.cursor() as cur:
            created: set[str] = set()
            cur.executemany(f"INSERT INTO jobs ({JOB_COLS}) VALUES ({_s(JOB_COLS)}) ON CONFLICT DO NOTHING "
                            "RETURNING job_id", [job_params(j) for j in jobs], returning=True)
            while True:  # one result per statement; a skipped job returns no row
                created.update(row[0] for row in cur.fetchall())
                if not cur.nextset():
                    break
            self._many(f"INSERT INTO tasks ({TASK_COLS}) VALUES ({_s(TASK_COLS)})",
                       [task_params(t) for t in tasks if t.job_id in created])
        return created

    def get_job(self, job_id: str) -> JobRow | None:
        rows = self._all(f"SELECT {JOB_COLS} FROM jobs WHERE job_id = %s", (job_id,))
        return job_from_row(rows[0]) if rows else None

    def get_jobs(self, job_ids: list[str]) -> dict[str, JobRow]:
        rows = self._all(f"SELECT {JOB_COLS} FROM jobs WHERE job_id = ANY(%s)", (list(job_ids),))
        return {r[0]: job_from_row(r) for r in rows}

    def list_jobs(self, limit: int = 100, oldest_first: bool = False, **filters) -> list[JobRow]:
        where, params = job_filters("%s", **filters)
        # The one order on every backend: newest first, ties by id (Cassandra's clustering), or its reverse.
        order = "created_ms ASC, job_id DESC" if oldest_first else "created_ms DESC, job_id ASC"
        return [job_from_row(r) for r in self._all(
            f"SELECT {JOB_COLS} FROM jobs{where} ORDER BY {order} LIMIT %s", (*params, limit))]

    def active_jobs(self) -> list[JobRow]:
        return [job_from_row(r) for r in self._all(
            f"SELECT {JOB_COLS} FROM jobs WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'KILLED', 'DELETED')")]

    def update_jobs(self, jobs: list[JobRow]) -> None:
        self._many("UPDATE jobs SET state = %s, updated_ms = %s, completed_ms = %s, instance_count = %s, "
                   "config_text = %s, config_version = %s, rollout = %s WHERE job_id = %s",
                   [job_update_params(j) for j in jobs])

    def tasks_of_job(self, job_id: str) -> list[TaskRow]:
        return [task_from_row(r) for r in
                self._all(f"SELECT {TASK_COLS} FROM tasks WHERE job_id = %s ORDER BY instance", (job_id,))]

    def tasks_by_instance(self, keys: list[tuple[str, int]], spec: bool = True) -> dict[tuple[str, int], TaskRow]:
        if not keys:
            return {}
        rows = self._all(f"SELECT {TASK_COLS if spec else TASK_COLS_NO_SPEC} FROM tasks WHERE (job_id, instance) IN "
                         f"(SELECT * FROM unnest(%s::text[], %s::int[]))",
                         ([k[0] for k in keys], [k[1] for k in keys]))
        return {(r[0], r[1]): task_from_row(r) for r in rows}

    def tasks_in_states(self, states: list[str], updated_before_ms: int, limit: int = 1000) -> list[TaskRow]:
        q = f"SELECT {TASK_COLS} FROM tasks WHERE state = ANY(%s) AND updated_ms < %s ORDER BY updated_ms LIMIT %s"
        return [task_from_row(r) for r in self._all(q, (list(states), updated_before_ms, limit))]

    def tasks_on_hosts(self, host_ids: list[str], states: list[str]) -> list[TaskRow]:
        # `host_id <> ''`: the partial index serves only a query that says so
        q = (f"SELECT {TASK_COLS} FROM tasks WHERE host_id = ANY(%s) AND host_id <> '' AND state = ANY(%s) "
             "ORDER BY job_id, instance")
        return [task_from_row(r) for r in self._all(q, (list(host_ids), list(states)))]

    def unlaunched_tasks_of_jobs(self, job_ids: list[str]) -> list[TaskRow]:
        return [task_from_row(r) for r in self._all(
            f"SELECT {TASK_COLS} FROM tasks WHERE state = ANY(%s) AND job_id = ANY(%s) ORDER BY job_id, instance",
            (list(UNLAUNCHED), list(job_ids)))]

    def save_tasks(self, tasks: list[TaskRow]) -> None:
        updates = ", ".join(f"{c} = excluded.{c}" for c in TASK_COLS.replace(" ", "").split(",")[2:])
        self._many(f"INSERT INTO tasks ({TASK_COLS}) VALUES ({_s(TASK_COLS)}) "
                   f"ON CONFLICT (job_id, instance) DO UPDATE SET {updates}", [task_params(t) for t in tasks])

    def update_task_runs(self, tasks: list[TaskRow], same_run: bool = False, same_host: bool = False) -> None:
        cols = moved_cols(same_run, same_host)
        self._many(f"UPDATE tasks SET {', '.join(f'{c} = %s' for c in cols)} WHERE job_id = %s AND instance = ANY(%s)",
                   [(*values, instances) for values, instances in alike_moves(tasks, cols).items()])

    def task_state_counts(self, job_ids: list[str]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {j: {} for j in job_ids}
        for job_id, state, n in self._all(
                "SELECT job_id, state, count(*) FROM tasks WHERE job_id = ANY(%s) GROUP BY job_id, state",
                (list(job_ids),)):
            out[job_id][state] = n
        return out

    def record_task_events(self, events: list[tuple]) -> None:
        if events:
            self._many("INSERT INTO task_event_batches (job_id, events) VALUES (%s, %s)", event_batches(events))

    def task_events(self, job_id: str) -> list[dict]:
        rows = self._all(f"SELECT {', '.join(EVENT_COLS)} FROM task_events WHERE job_id = %s ORDER BY seq", (job_id,))
        out = [dict(zip(EVENT_COLS, r, strict=True)) for r in rows]
        for (text,) in self._all("SELECT events FROM task_event_batches WHERE job_id = %s ORDER BY seq", (job_id,)):
            out.extend(events_of_batch(job_id, bytes(text)))
        return out

    def delete_job(self, job_id: str, at_ms: int) -> bool:
        with self.transaction():
            for table in ("task_events", "task_event_batches", "tasks", "updates", "job_configs"):
                self._count(f"DELETE FROM {table} WHERE job_id = %s", (job_id,))
            if not self._count("DELETE FROM jobs WHERE job_id = %s", (job_id,)):
                return False
            self._count("INSERT INTO deleted_jobs (job_id, deleted_ms) VALUES (%s, %s) ON CONFLICT (job_id) "
                        "DO UPDATE SET deleted_ms = EXCLUDED.deleted_ms", (job_id, at_ms))
            return True

    def ended_jobs(self, completed_before_ms: int, limit: int) -> list[str]:
        return [r[0] for r in self._all("SELECT job_id FROM jobs WHERE completed_ms < %s AND state = ANY(%s) "
                                        "ORDER BY completed_ms LIMIT %s",
                                        (completed_before_ms, sorted(JOB_TERMINAL), limit))]

    def deleted_jobs(self, job_ids: list[str]) -> dict[str, int]:
        return dict(self._all("SELECT job_id, deleted_ms FROM deleted_jobs WHERE job_id = ANY(%s)",
                              (list(dict.fromkeys(job_ids)),)))

    def refuse_command(self, command_id: str, job_id: str, pool: str, kind: str, reason: str, at_ms: int) -> None:
        self._count("INSERT INTO refused_commands (command_id, job_id, pool, kind, reason, at_ms) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (command_id, job_id, pool, kind, reason, at_ms))

    def command_outcome(self, command_id: str) -> dict | None:
        rows = self._all("SELECT job_id, pool, kind, reason, at_ms FROM refused_commands WHERE command_id = %s",
                         (command_id,))
        if rows:
            return {"state": "refused", **dict(zip(("job_id", "pool", "kind", "reason", "at_ms"), rows[0], strict=True))}
        rows = self._all("SELECT job_id, at_ms FROM job_commands WHERE command_id = %s", (command_id,))
        return {"state": "applied", "job_id": rows[0][0], "at_ms": rows[0][1]} if rows else None

    def forget_claims(self, now_ms: int) -> int:
        before = now_ms - CLAIMS_KEPT_MS
        with self.transaction():
            return (self._count("DELETE FROM job_commands WHERE at_ms < %s", (before,))
                    + self._count("DELETE FROM deleted_jobs WHERE deleted_ms < %s", (before,))
                    + self._count("DELETE FROM refused_commands WHERE at_ms < %s", (before,)))

    def save_updates(self, updates: list[dict]) -> None:
        self._many("INSERT INTO updates (update_id, job_id, state, body, created_ms) VALUES (%s, %s, %s, %s, %s) "
                   "ON CONFLICT (update_id) DO UPDATE SET state = EXCLUDED.state, body = EXCLUDED.body",
                   [update_params(u) for u in updates])

    def get_update(self, update_id: str) -> dict | None:
        rows = self._all("SELECT body FROM updates WHERE update_id = %s", (update_id,))
        return orjson.loads(rows[0][0]) if rows else None

    def updates_of_job(self, job_id: str) -> list[dict]:
        return [orjson.loads(r[0]) for r in self._all(
            "SELECT body FROM updates WHERE job_id = %s ORDER BY created_ms DESC, update_id", (job_id,))]

    def save_job_configs(self, rows: list[tuple[str, int, str, int]]) -> None:
        self._many("INSERT INTO job_configs (job_id, version, config_text, created_ms) VALUES (%s, %s, %s, %s) "
                   "ON CONFLICT DO NOTHING", rows)

    def job_config(self, job_id: str, version: int) -> str | None:
        rows = self._all("SELECT config_text FROM job_configs WHERE job_id = %s AND version = %s", (job_id, version))
        return rows[0][0] if rows else None

    def claim_commands(self, command_ids: list[str], job_ids: list[str], at_ms: int) -> set[str]:
        if not command_ids:
            return set()
        with self.transaction() as conn, conn.cursor() as cur:
            new: set[str] = set()
            cur.executemany("INSERT INTO job_commands (command_id, job_id, at_ms) VALUES (%s, %s, %s) "
                            "ON CONFLICT DO NOTHING RETURNING command_id",
                            [(c, j, at_ms) for c, j in zip(command_ids, job_ids, strict=True)], returning=True)
            while True:
                new.update(row[0] for row in cur.fetchall())
                if not cur.nextset():
                    break
            return new

    # -- allocations ------------------------------------------------------------------------
    def allocations(self, pools: list[str] | None = None) -> list[Allocation]:
        q = f"SELECT {ALLOCATION_COLS} FROM allocations WHERE released_ms IS NULL"
        if pools is None:
            return [allocation_from_row(r) for r in self._all(q)]
        return [allocation_from_row(r) for r in self._all(f"{q} AND pool = ANY(%s)", (list(pools),))]

    def release_allocations(self, task_ids: list[str], released_ms: int) -> None:
        if task_ids:
            self._count("UPDATE allocations SET released_ms = %s WHERE task_id = ANY(%s) AND released_ms IS NULL",
                        (released_ms, list(task_ids)))

    def allocation_states(self, task_ids: list[str]) -> dict[str, str]:
        rows = self._all("SELECT task_id, released_ms FROM allocations WHERE task_id = ANY(%s)", (list(task_ids),))
        return {t: "held" if released is None else "released" for t, released in rows}

    def forget_released_allocations(self, before_ms: int, limit: int) -> int:
        return self._count("DELETE FROM allocations WHERE task_id IN (SELECT task_id FROM allocations "
                           "WHERE released_ms < %s LIMIT %s)", (before_ms, limit))

    def add_allocations(self, rows: list[Allocation]) -> None:
        updates = ", ".join(f"{c} = excluded.{c}" for c in ALLOCATION_COLS.replace(" ", "").split(",")[1:])
        self._many(f"INSERT INTO allocations ({ALLOCATION_COLS}) VALUES ({_s(ALLOCATION_COLS)}) "
                   f"ON CONFLICT (task_id) DO UPDATE SET {updates}, released_ms = NULL",
                   [allocation_params(a) for a in rows])

    def remove_allocations(self, task_ids: list[str]) -> None:
        if task_ids:
            self._count("DELETE FROM allocations WHERE task_id = ANY(%s)", (list(task_ids),))

    # -- pool queues ------------------------------------------------------------------------
    def queue_gangs(self, rows: list[QueuedGang]) -> None:
        self._many(f"INSERT INTO queued_gangs ({QUEUED_COLS}) VALUES ({_s(QUEUED_COLS)}) ON CONFLICT DO NOTHING",
                   [queued_params(q) for q in rows])

    def queued_gangs(self, pools: list[str] | None = None) -> list[QueuedGang]:
        if pools is None:
            return [queued_from_row(r) for r in self._all(
                f"SELECT {QUEUED_COLS} FROM queued_gangs WHERE admitted_ms IS NULL ORDER BY seq")]
        return [queued_from_row(r) for r in self._all(
            f"SELECT {QUEUED_COLS} FROM queued_gangs WHERE admitted_ms IS NULL AND pool = ANY(%s) ORDER BY seq",
            (list(pools),))]

    def unsent_admissions(self) -> list[QueuedGang]:
        return [queued_from_row(r) for r in self._all(
            f"SELECT {QUEUED_COLS}, admitted_ms FROM queued_gangs WHERE admitted_ms IS NOT NULL ORDER BY seq")]

    def admissions_sent(self, gang_ids: list[str]) -> None:
        self.unqueue_gangs(gang_ids)

    def unqueue_gangs(self, gang_ids: list[str]) -> None:
        if gang_ids:
            self._count("DELETE FROM queued_gangs WHERE gang_id = ANY(%s)", (list(gang_ids),))

    def admit_gangs(self, gang_ids: list[str], allocations: list[Allocation],
                    unqueued: list[Allocation] = ()) -> set[str]:
        with self.transaction():
            if unqueued:
                self.add_allocations(list(unqueued))
            if not gang_ids:
                return set()
            taken = {r[0] for r in self._all(
                "UPDATE queued_gangs SET admitted_ms = %s WHERE gang_id = ANY(%s) AND admitted_ms IS NULL "
                "RETURNING gang_id", (int(time.time() * 1000), list(gang_ids)))}
            self.add_allocations([a for a in allocations if a.gang_id in taken])
            return taken

    # -- launches ---------------------------------------------------------------------------
    def claim_launches(self, rows: list[Launch]) -> set[str]:
        if not rows:
            return set()
        with self.transaction() as conn, conn.cursor() as cur:
            new: set[str] = set()
            cur.executemany(f"INSERT INTO launches ({LAUNCH_COLS}) VALUES ({_s(LAUNCH_COLS)}) "
                            "ON CONFLICT DO NOTHING RETURNING task_id", [launch_params(r) for r in rows],
                            returning=True)
            while True:
                new.update(row[0] for row in cur.fetchall())
                if not cur.nextset():
                    break
        return new

    def end_launches(self, task_ids: list[str], ended_ms: int, final_status: dict[str, dict] | None = None) -> None:
        final_status = final_status or {}
        self._many("UPDATE launches SET ended_ms = %s, final_status = %s WHERE task_id = %s AND ended_ms IS NULL",
                   [(ended_ms, json_text(final_status[t]) if t in final_status else None, t) for t in task_ids])

    def active_launches(self, host_ids: list[str]) -> list[Launch]:
        return [launch_from_row(r) for r in self._all(
            f"SELECT {LAUNCH_COLS} FROM launches WHERE ended_ms IS NULL AND host_id = ANY(%s)", (list(host_ids),))]

    def set_host_state(self, host_id: str, state: str, at_ms: int) -> None:
        if state == "UP":
            self._many("DELETE FROM host_maintenance WHERE host_id = %s", [(host_id,)])
        else:
            self._many("INSERT INTO host_maintenance (host_id, state, updated_ms) VALUES (%s, %s, %s) "
                       "ON CONFLICT (host_id) DO UPDATE SET state = excluded.state, updated_ms = excluded.updated_ms",
                       [(host_id, state, at_ms)])

    def host_states(self) -> dict[str, str]:
        return dict(self._all("SELECT host_id, state FROM host_maintenance", ()))

    def add_token(self, row: TokenRow) -> None:
        self._many(f"INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ({_s(TOKEN_COLUMNS)})", [token_params(row)])

    def get_token(self, token_id: str) -> TokenRow | None:
        rows = self._all(f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE token_id = %s", (token_id,))
        return token_from_row(rows[0]) if rows else None

    def revoke_token(self, token_id: str, at_ms: int) -> bool:
        with self._conn() as conn:
            return conn.execute("UPDATE tokens SET revoked_ms = %s WHERE token_id = %s AND revoked_ms IS NULL",
                                (at_ms, token_id)).rowcount > 0

    def list_tokens(self) -> list[TokenRow]:
        return [token_from_row(r) for r in self._all(f"SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_ms", ())]

    def active_launch_hosts(self) -> list[str]:
        return [r[0] for r in self._all("SELECT DISTINCT host_id FROM launches WHERE ended_ms IS NULL", ())]

    def ended_launches(self, host_ids: list[str], since_ms: int) -> list[dict]:
        return [json.loads(r[0]) for r in self._all(
            "SELECT final_status FROM launches WHERE ended_ms >= %s AND final_status IS NOT NULL "
            "AND host_id = ANY(%s) ORDER BY ended_ms", (since_ms, list(host_ids)))]

    def forget_launches(self, now_ms: int, limit: int) -> int:
        return self._count("DELETE FROM launches WHERE task_id IN (SELECT task_id FROM launches WHERE ended_ms < %s "
                           "LIMIT %s)", (now_ms - CLAIMS_KEPT_MS, limit))

    def launch_counts(self, job_id: str) -> dict[int, int]:
        return dict(self._all("SELECT instance, count(*) FROM launches WHERE job_id = %s GROUP BY instance",
                              (job_id,)))

    def close(self) -> None:
        self.pool.close()
