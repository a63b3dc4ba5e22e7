"""Embedded SQLite backend: files shared by every process of a dev stack (WAL mode).

A SQLite file has one write lock. With every table in one file, each stage's write waited for
the others': in the bench's steady minute the job manager held it a third of the time, and
entitle and launch each waited 3-5 s for it, in waits of up to a quarter of a second per batch.
So the tables a stage alone writes on every batch live in a file of their own (a part): entitle's
allocations and queues in `<name>.allocations.db`, launch's claims in `<name>.launches.db`, and
everything else in the file named. A transaction takes each part's write lock when it first
touches that part, so a batch of entitle or launch never waits for the job manager's. No
transaction writes two parts (each part is one stage's), so nothing needs to be atomic across
files. A file made before the parts has their tables moved out the first time it is opened."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import orjson

from peloton.model.states import JOB_TERMINAL, UNLAUNCHED
from peloton.store.base import (
    CLAIMS_KEPT_MS,
    INDEXED_STATES,
    Allocation,
    JobRow,
    Launch,
    QueuedGang,
    StorageGateway,
    TaskRow,
    require_indexed,
)
from peloton.auth.tokens import TokenRow
from peloton.store.rows import (
    TOKEN_COLUMNS,
    pool_path_range,
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
    spec_of,
    spec_template,
    moved_cols,
    alike_moves,
    queued_params,
    task_from_row,
    task_params,
    token_from_row,
    token_params,
    update_params,
)

# The partial index of tasks in INDEXED_STATES, its condition as equalities joined by OR: with an
# IN list SQLite evaluated the list as a table at every row an UPDATE wrote, which cost more than
# the index saved. 300,000 status updates of 50,000 tasks: 1.8 s of CPU with no such index, 3.1
# with (state, updated_ms) over every state, 3.6 partial with IN, 2.4 partial with OR.
# tasks_in_states repeats the condition word for word: SQLite uses a partial index only then.
_WAITING = "(" + " OR ".join(f"state = '{s}'" for s in INDEXED_STATES) + ")"
MAIN_SCHEMA = """
CREATE TABLE IF NOT EXISTS pools (
    path TEXT PRIMARY KEY, config TEXT NOT NULL, updated_ms INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, name TEXT, pool TEXT, type TEXT, state TEXT, instance_count INTEGER,
    priority INTEGER, preemptible INTEGER, placement_strategy TEXT, owner TEXT, config_text TEXT,
    created_ms INTEGER, updated_ms INTEGER, completed_ms INTEGER, revocable INTEGER, config_version INTEGER,
    rollout TEXT);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL, instance INTEGER NOT NULL, run_id INTEGER NOT NULL, task_id TEXT NOT NULL,
    pool TEXT, gang_id TEXT, state TEXT, spec TEXT, max_failures INTEGER, failures INTEGER,
    host_id TEXT, reason TEXT, message TEXT, exit_code INTEGER, signal INTEGER, updated_ms INTEGER, health TEXT,
    PRIMARY KEY (job_id, instance));
CREATE INDEX IF NOT EXISTS tasks_waiting_by_state ON tasks (state, updated_ms) WHERE {waiting};
CREATE INDEX IF NOT EXISTS tasks_placed_by_host ON tasks (host_id) WHERE host_id != '';
CREATE TABLE IF NOT EXISTS job_task_specs (job_id TEXT PRIMARY KEY, spec TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS task_events (
    task_id TEXT, job_id TEXT, instance INTEGER, run_id INTEGER, state TEXT, reason TEXT,
    exit_code INTEGER, timestamp_ms INTEGER, host_id TEXT, message TEXT);
CREATE TABLE IF NOT EXISTS job_commands (command_id TEXT PRIMARY KEY, job_id TEXT, at_ms INTEGER);
CREATE TABLE IF NOT EXISTS refused_commands (
    command_id TEXT PRIMARY KEY, job_id TEXT, pool TEXT, kind TEXT, reason TEXT, at_ms INTEGER);
CREATE INDEX IF NOT EXISTS task_events_by_job ON task_events (job_id);
CREATE INDEX IF NOT EXISTS job_commands_by_time ON job_commands (at_ms);
CREATE INDEX IF NOT EXISTS refused_commands_by_time ON refused_commands (at_ms);
CREATE TABLE IF NOT EXISTS task_event_batches (job_id TEXT NOT NULL, events BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS task_event_batches_by_job ON task_event_batches (job_id);
CREATE INDEX IF NOT EXISTS jobs_by_completion ON jobs (completed_ms);
CREATE TABLE IF NOT EXISTS deleted_jobs (job_id TEXT PRIMARY KEY, deleted_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS deleted_jobs_by_time ON deleted_jobs (deleted_ms);
CREATE TABLE IF NOT EXISTS updates (
    update_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, state TEXT, body TEXT NOT NULL, created_ms INTEGER);
CREATE INDEX IF NOT EXISTS updates_by_job ON updates (job_id, created_ms);
CREATE TABLE IF NOT EXISTS job_configs (
    job_id TEXT NOT NULL, version INTEGER NOT NULL, config_text TEXT NOT NULL, created_ms INTEGER,
    PRIMARY KEY (job_id, version));
CREATE TABLE IF NOT EXISTS host_maintenance (host_id TEXT PRIMARY KEY, state TEXT NOT NULL, updated_ms INTEGER);
CREATE TABLE IF NOT EXISTS tokens (
    token_id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, user_name TEXT NOT NULL, groups TEXT NOT NULL,
    admin INTEGER NOT NULL, created_ms INTEGER NOT NULL, revoked_ms INTEGER);
""".replace("{waiting}", _WAITING)
MAIN, ALLOCATIONS, LAUNCHES = "main", "allocations", "launches"
# Each part's tables; MAIN's file is the one named, the others' are named after it.
PART_SCHEMAS = {MAIN: MAIN_SCHEMA, ALLOCATIONS: """
CREATE TABLE IF NOT EXISTS allocations (
    task_id TEXT PRIMARY KEY, pool TEXT, gang_id TEXT, cpu REAL, mem_mb REAL, disk_mb REAL,
    gpu REAL, admitted_ms INTEGER, released_ms INTEGER, priority INTEGER, preemptible INTEGER,
    revocable INTEGER, controller INTEGER);
CREATE TABLE IF NOT EXISTS queued_gangs (
    gang_id TEXT PRIMARY KEY, pool TEXT, priority INTEGER, seq INTEGER, gang TEXT, not_before_ms INTEGER);
""", LAUNCHES: """
CREATE TABLE IF NOT EXISTS launches (
    task_id TEXT PRIMARY KEY, job_id TEXT, instance INTEGER, run_id INTEGER, host_id TEXT,
    cpu REAL, mem_mb REAL, disk_mb REAL, gpu REAL, launched_ms INTEGER, ended_ms INTEGER,
    final_status TEXT);
CREATE INDEX IF NOT EXISTS launches_running_by_host ON launches (host_id) WHERE ended_ms IS NULL;
CREATE INDEX IF NOT EXISTS launches_ended ON launches (ended_ms) WHERE ended_ms IS NOT NULL;
"""}
# The tables of each part but MAIN: what a file made before the parts has moved out of it.
PART_TABLES = {ALLOCATIONS: ("allocations", "queued_gangs"), LAUNCHES: ("launches",)}
# Columns added since a table was first made: files made before get them added.
ADDED_COLUMNS = {
    MAIN: (("jobs", "revocable", "INTEGER"), ("task_events", "host_id", "TEXT"), ("task_events", "message", "TEXT"),
           ("jobs", "config_version", "INTEGER"), ("jobs", "rollout", "TEXT"), ("tasks", "health", "TEXT")),
    ALLOCATIONS: (("allocations", "released_ms", "INTEGER"), ("allocations", "priority", "INTEGER"),
                  ("allocations", "preemptible", "INTEGER"), ("allocations", "revocable", "INTEGER"),
                  ("allocations", "controller", "INTEGER"), ("queued_gangs", "admitted_ms", "INTEGER")),
    LAUNCHES: (("launches", "final_status", "TEXT"),),
}

# SQLite limits bound variables per statement; IN lists are chunked below this.
_CHUNK = 900
_UNLAUNCHED = "(" + ", ".join(f"'{s}'" for s in UNLAUNCHED) + ")"
_TERMINAL = "(" + ", ".join(f"'{s}'" for s in sorted(JOB_TERMINAL)) + ")"


def _q(cols: str) -> str:
    return placeholders(cols, "?")


def _chunks(items: list, size: int = _CHUNK):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _new_task_rows(tasks: list[TaskRow]) -> tuple[list[tuple], list[tuple[str, str]]]:
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


def part_path(path: Path, part: str) -> Path:
    """The file of a part: MAIN's is the one named, the others' `<name>.<part><suffix>`."""
    return path if part == MAIN else path.with_name(f"{path.stem}.{part}{path.suffix}")


def store_files(path: Path) -> list[Path]:
    """Every file of the store named `path`: each part's, with its WAL and shared memory."""
    return [Path(f"{part_path(path, part)}{suffix}") for part in PART_SCHEMAS for suffix in ("", "-wal", "-shm")]


class SqliteStore(StorageGateway):
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._depth = 0
        self._owner = 0  # the thread whose transaction is open
        self._begun: list[str] = []  # the parts whose write lock that transaction holds
        self._dbs = {part: self._connect(self.part_path(part)) for part in PART_SCHEMAS}
        for part, schema in PART_SCHEMAS.items():
            with self.transaction():
                db = self._part(part)
                for statement in schema.split(";"):
                    if statement.strip():
                        db.execute(statement)
                for table, column, kind in ADDED_COLUMNS[part]:
                    if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        self._move_parts_out()
        with self.transaction():
            # Files made before the partial indexes had them over every row: tasks by state, and
            # launches by host and by end. A launch's host is wanted only while it runs, and its
            # end only once it has ended; over every row, each claim and each end wrote a page of
            # an index as large as the table, at a random host's place (launch's claim 10 -> 6.3
            # us a row, its end 11 -> 5.7). And by job, which only tests ask (launch_counts, a
            # scan): each claim wrote it too (launch alone 37.6 -> 36.5 us a run's placement).
            # Tasks by task id, which nothing reads (a task id is its job, instance and run), and
            # by host over every row, where a new task's empty host took a place too: a task's
            # insert 9.4 -> 8.3 us, and with the host index partial 8.7 -> 8.0 (its first host
            # 9.5 -> 8.8).
            for old in ("tasks_by_state", "tasks_by_task_id", "tasks_by_host"):
                self.db.execute(f"DROP INDEX IF EXISTS {old}")
            # (After the columns: files made before released_ms had none to index.) Only released
            # allocations, which the sweep forgets by age: over every row, each admission wrote
            # an entry too, and each release moved it (in isolation, insert 4.55 -> 3.8 us a row,
            # release 3.1 -> 2.4). Held ones are read whole only at start (a scan).
            allocations = self._part(ALLOCATIONS)
            allocations.execute("DROP INDEX IF EXISTS allocations_by_release")
            allocations.execute("CREATE INDEX IF NOT EXISTS allocations_released ON allocations (released_ms) "
                                "WHERE released_ms IS NOT NULL")

    def part_path(self, part: str) -> Path:
        return part_path(self.path, part)

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        # Autocommit mode; writes group themselves with transaction() (BEGIN IMMEDIATE takes the
        # write lock up front so two processes never deadlock upgrading a read lock).
        # The store's files are its readers' alone (tasks share the machine): made 0600, and SQLite
        # gives its WAL and shared memory files the database's own mode.
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            try:
                if file.stat().st_uid == os.geteuid():
                    os.chmod(file, 0o600)
            except FileNotFoundError:
                pass
        db = sqlite3.connect(str(path), timeout=60, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=60000")
        return db

    def _move_parts_out(self) -> None:
        """A file made before the parts holds their tables: their rows move to the parts' files
        (the columns both have), and the tables leave it. Once, by whichever process first gets
        the lock of all three files (an attached file's is taken with the main one's)."""
        old = [t for part in PART_TABLES.values() for t in part]
        if not self.db.execute(f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name IN "
                               f"({', '.join('?' * len(old))})", old).fetchone():
            return
        db = self._dbs[MAIN]
        for part in PART_TABLES:
            db.execute("ATTACH DATABASE ? AS ?", (str(self.part_path(part)), f"part_{part}"))
        try:
            with self.transaction():
                self._part(MAIN)  # BEGIN IMMEDIATE: the attached files' locks too
                for part, tables in PART_TABLES.items():
                    for table in tables:
                        if not db.execute("SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?",
                                          (table,)).fetchone():
                            continue  # another process moved it first
                        mine = [r[1] for r in db.execute(f"PRAGMA main.table_info({table})")]
                        theirs = {r[1] for r in db.execute(f"PRAGMA part_{part}.table_info({table})")}
                        cols = ", ".join(c for c in mine if c in theirs)
                        db.execute(f"INSERT OR IGNORE INTO part_{part}.{table} ({cols}) SELECT {cols} FROM main.{table}")
                        db.execute(f"DROP TABLE main.{table}")
        finally:
            for part in PART_TABLES:
                db.execute("DETACH DATABASE ?", (f"part_{part}",))

    @property
    def db(self) -> sqlite3.Connection:
        """MAIN's connection (jobs, tasks, pools and the rest), its write lock taken first if
        this thread's transaction has not yet."""
        return self._part(MAIN)

    def connection(self, part: str = MAIN) -> sqlite3.Connection:
        """A part's connection, for a test that reads a query's plan."""
        return self._dbs[part]

    def _part(self, part: str) -> sqlite3.Connection:
        db = self._dbs[part]
        if self._depth and part not in self._begun and self._owner == threading.get_ident():
            db.execute("BEGIN IMMEDIATE")
            self._begun.append(part)
        return db

    @contextmanager
    def transaction(self):
        """Writes of this thread inside it commit together; each part's write lock is taken
        when the transaction first touches that part (_part), and held until it ends."""
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._owner, self._begun = threading.get_ident(), []
            self._depth += 1
            try:
                yield self
            except BaseException:
                self._depth -= 1
                if outer:
                    self._end("ROLLBACK")
                raise
            self._depth -= 1
            if outer:
                self._end("COMMIT")

    def _end(self, word: str) -> None:
        begun, self._begun, self._owner = self._begun, [], 0
        try:
            for part in begun:
                self._dbs[part].execute(word)
        except BaseException:
            for part in begun:  # a failed COMMIT leaves its transaction open; so would the rest
                if self._dbs[part].in_transaction:
                    self._dbs[part].execute("ROLLBACK")
            raise

    # -- pools ------------------------------------------------------------------------------
    def put_pool(self, path: str, config: dict) -> None:
        with self.transaction():
            self.db.execute(
                "INSERT INTO pools (path, config, updated_ms) VALUES (?, ?, ?) "
                "ON CONFLICT(path) DO UPDATE SET config=excluded.config, updated_ms=excluded.updated_ms",
                (path, json.dumps(config), config.get("updated_ms", 0)),
            )

    def get_pool(self, path: str) -> dict | None:
        row = self.db.execute("SELECT config FROM pools WHERE path = ?", (path,)).fetchone()
        return orjson.loads(row[0]) if row else None

    def list_pools(self) -> dict[str, dict]:
        # orjson: 3.8 ms for 1,000 pools against 11.3 with json (every admit batch and API call reads them)
        return {p: orjson.loads(c) for p, c in self.db.execute("SELECT path, config FROM pools ORDER BY path")}

    def has_pools_below(self, path: str) -> bool:
        low, high = pool_path_range(path)
        row = self.db.execute("SELECT 1 FROM pools WHERE path > ? AND path < ? LIMIT 1", (low, high)).fetchone()
        return row is not None

    def delete_pool(self, path: str) -> bool:
        with self.transaction():
            return self.db.execute("DELETE FROM pools WHERE path = ?", (path,)).rowcount > 0

    def lock_pool_tree(self) -> None:
        self._part(MAIN)  # in a transaction, the first touch of the pools' file takes its write lock

    def pools_with_jobs(self) -> set[str]:
        q = "SELECT DISTINCT pool FROM jobs WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'KILLED', 'DELETED')"
        return {r[0] for r in self.db.execute(q)}

    # -- jobs and tasks ---------------------------------------------------------------------
    def create_jobs(self, jobs: list[JobRow], tasks: list[TaskRow]) -> set[str]:
        if not jobs:
            return set()
        with self.transaction():
            existing = set()
            ids = [j.job_id for j in jobs]
            for chunk in _chunks(ids):
                q = f"SELECT job_id FROM jobs WHERE job_id IN ({','.join('?' * len(chunk))})"
                existing.update(r[0] for r in self.db.execute(q, chunk))
            new_jobs = [j for j in jobs if j.job_id not in existing]
            new_ids = {j.job_id for j in new_jobs}
            self.db.executemany(f"INSERT INTO jobs ({JOB_COLS}) VALUES ({_q(JOB_COLS)})",
                                [job_params(j) for j in new_jobs])
            rows, shared = _new_task_rows([t for t in tasks if t.job_id in new_ids])
            self.db.executemany("INSERT OR REPLACE INTO job_task_specs (job_id, spec) VALUES (?, ?)", shared)
            self.db.executemany(f"INSERT INTO tasks ({TASK_COLS}) VALUES ({_q(TASK_COLS)})", rows)
        return new_ids

    def _tasks(self, rows) -> list[TaskRow]:
        """Task rows read with their specs: a row that holds none takes its job's shared one."""
        out = [task_from_row(r) for r in rows]
        jobs = {t.job_id for t in out if t.spec is None}
        if jobs:
            shared: dict[str, dict] = {}
            for chunk in _chunks(sorted(jobs)):
                q = f"SELECT job_id, spec FROM job_task_specs WHERE job_id IN ({','.join('?' * len(chunk))})"
                shared.update((job_id, orjson.loads(text)) for job_id, text in self.db.execute(q, chunk))
            for t in out:
                if t.spec is None and t.job_id in shared:
                    t.spec = spec_of(t, shared[t.job_id])
        return out

    def get_job(self, job_id: str) -> JobRow | None:
        row = self.db.execute(f"SELECT {JOB_COLS} FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return job_from_row(row) if row else None

    def get_jobs(self, job_ids: list[str]) -> dict[str, JobRow]:
        out = {}
        for chunk in _chunks(list(job_ids)):
            q = f"SELECT {JOB_COLS} FROM jobs WHERE job_id IN ({','.join('?' * len(chunk))})"
            for row in self.db.execute(q, chunk):
                out[row[0]] = job_from_row(row)
        return out

    def list_jobs(self, limit: int = 100, oldest_first: bool = False, **filters) -> list[JobRow]:
        where, params = job_filters("?", **filters)
        # The one order on every backend: newest first, ties by id (Cassandra's clustering), or its reverse.
        order = "created_ms ASC, job_id DESC" if oldest_first else "created_ms DESC, job_id ASC"
        q = f"SELECT {JOB_COLS} FROM jobs{where} ORDER BY {order} LIMIT ?"
        return [job_from_row(r) for r in self.db.execute(q, (*params, limit))]

    def active_jobs(self) -> list[JobRow]:
        q = f"SELECT {JOB_COLS} FROM jobs WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'KILLED', 'DELETED')"
        return [job_from_row(r) for r in self.db.execute(q)]

    def update_jobs(self, jobs: list[JobRow]) -> None:
        with self.transaction():
            self.db.executemany(
                "UPDATE jobs SET state = ?, updated_ms = ?, completed_ms = ?, instance_count = ?, config_text = ?, "
                "config_version = ?, rollout = ? WHERE job_id = ?",
                [job_update_params(j) for j in jobs],
            )

    def tasks_of_job(self, job_id: str) -> list[TaskRow]:
        q = f"SELECT {TASK_COLS} FROM tasks WHERE job_id = ? ORDER BY instance"
        return self._tasks(self.db.execute(q, (job_id,)))

    def tasks_by_instance(self, keys: list[tuple[str, int]], spec: bool = True) -> dict[tuple[str, int], TaskRow]:
        cols = TASK_COLS if spec else TASK_COLS_NO_SPEC
        out: dict[tuple[str, int], TaskRow] = {}
        by_job: dict[str, list[int]] = {}
        for job_id, instance in keys:
            by_job.setdefault(job_id, []).append(instance)
        for job_id, instances in by_job.items():
            for chunk in _chunks(sorted(set(instances))):
                q = f"SELECT {cols} FROM tasks WHERE job_id = ? AND instance IN ({','.join('?' * len(chunk))})"
                rows = self.db.execute(q, (job_id, *chunk))
                for t in (self._tasks(rows) if spec else map(task_from_row, rows)):
                    out[(t.job_id, t.instance)] = t
        return out

    def tasks_in_states(self, states: list[str], updated_before_ms: int, limit: int = 1000) -> list[TaskRow]:
        require_indexed(states, "SQLite")
        q = (f"SELECT {TASK_COLS} FROM tasks WHERE {_WAITING} AND state IN ({','.join('?' * len(states))}) "
             "AND updated_ms < ? ORDER BY updated_ms LIMIT ?")
        return self._tasks(self.db.execute(q, (*states, updated_before_ms, limit)))

    def tasks_on_hosts(self, host_ids: list[str], states: list[str]) -> list[TaskRow]:
        out = []
        for chunk in _chunks(list(host_ids)):
            # `host_id != ''` word for word: SQLite uses a partial index only then.
            q = (f"SELECT {TASK_COLS} FROM tasks WHERE host_id IN ({','.join('?' * len(chunk))}) AND host_id != '' "
                 f"AND state IN ({','.join('?' * len(states))}) ORDER BY job_id, instance")
            out.extend(self._tasks(self.db.execute(q, (*chunk, *states))))
        return out

    def unlaunched_tasks_of_jobs(self, job_ids: list[str]) -> list[TaskRow]:
        out = []
        for chunk in _chunks(list(job_ids)):
            q = (
                f"SELECT {TASK_COLS} FROM tasks WHERE state IN {_UNLAUNCHED} AND job_id IN ({','.join('?' * len(chunk))}) "
                "ORDER BY job_id, instance"
            )
            out.extend(self._tasks(self.db.execute(q, chunk)))
        return out

    def save_tasks(self, tasks: list[TaskRow]) -> None:
        with self.transaction():
            self.db.executemany(
                f"INSERT OR REPLACE INTO tasks ({TASK_COLS}) VALUES ({_q(TASK_COLS)})",
                [task_params(t) for t in tasks],
            )

    def update_task_runs(self, tasks: list[TaskRow], same_run: bool = False, same_host: bool = False) -> None:
        if not tasks:
            return
        cols = moved_cols(same_run, same_host)
        one, many = [], []  # a run alone: its instance; alike runs of a job: theirs as a JSON array
        for values, instances in alike_moves(tasks, cols).items():
            if len(instances) == 1:
                one.append((*values, instances[0]))
            else:
                many.append((*values, json_text(instances)))
        sets = ", ".join(f"{c} = ?" for c in cols)
        with self.transaction():
            if one:
                self.db.executemany(f"UPDATE tasks SET {sets} WHERE job_id = ? AND instance = ?", one)
            if many:
                # json_each keeps one statement text (cached) for any number of instances, and
                # SQLite still finds each row by its primary key.
                self.db.executemany(f"UPDATE tasks SET {sets} WHERE job_id = ? AND instance IN "
                                    "(SELECT value FROM json_each(?))", many)

    def task_state_counts(self, job_ids: list[str]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {j: {} for j in job_ids}
        for chunk in _chunks(list(job_ids)):
            q = (
                f"SELECT job_id, state, COUNT(*) FROM tasks WHERE job_id IN ({','.join('?' * len(chunk))}) "
                "GROUP BY job_id, state"
            )
            for job_id, state, n in self.db.execute(q, chunk):
                out[job_id][state] = n
        return out

    def record_task_events(self, events: list[tuple]) -> None:
        if events:
            with self.transaction():
                self.db.executemany("INSERT INTO task_event_batches (job_id, events) VALUES (?, ?)",
                                    event_batches(events))

    def task_events(self, job_id: str) -> list[dict]:
        # task_events: one row per event, as files made before the batches hold them (older first)
        q = f"SELECT {', '.join(EVENT_COLS)} FROM task_events WHERE job_id = ? ORDER BY rowid"
        out = [dict(zip(EVENT_COLS, r, strict=True)) for r in self.db.execute(q, (job_id,))]
        for (text,) in self.db.execute("SELECT events FROM task_event_batches WHERE job_id = ? ORDER BY rowid",
                                       (job_id,)):
            out.extend(events_of_batch(job_id, text))
        return out

    def delete_job(self, job_id: str, at_ms: int) -> bool:
        with self.transaction():
            self.db.execute("DELETE FROM task_events WHERE job_id = ?", (job_id,))
            self.db.execute("DELETE FROM task_event_batches WHERE job_id = ?", (job_id,))
            self.db.execute("DELETE FROM tasks WHERE job_id = ?", (job_id,))
            self.db.execute("DELETE FROM job_task_specs WHERE job_id = ?", (job_id,))
            self.db.execute("DELETE FROM updates WHERE job_id = ?", (job_id,))
            self.db.execute("DELETE FROM job_configs WHERE job_id = ?", (job_id,))
            if not self.db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,)).rowcount:
                return False
            self.db.execute("INSERT OR REPLACE INTO deleted_jobs (job_id, deleted_ms) VALUES (?, ?)", (job_id, at_ms))
            return True

    def save_updates(self, updates: list[dict]) -> None:
        self.db.executemany("INSERT OR REPLACE INTO updates (update_id, job_id, state, body, created_ms) "
                            "VALUES (?, ?, ?, ?, ?)", [update_params(u) for u in updates])

    def get_update(self, update_id: str) -> dict | None:
        row = self.db.execute("SELECT body FROM updates WHERE update_id = ?", (update_id,)).fetchone()
        return orjson.loads(row[0]) if row else None

    def updates_of_job(self, job_id: str) -> list[dict]:
        return [orjson.loads(r[0]) for r in self.db.execute(
            "SELECT body FROM updates WHERE job_id = ? ORDER BY created_ms DESC, update_id", (job_id,))]

    def save_job_configs(self, rows: list[tuple[str, int, str, int]]) -> None:
        self.db.executemany("INSERT OR IGNORE INTO job_configs (job_id, version, config_text, created_ms) "
                            "VALUES (?, ?, ?, ?)", rows)

    def job_config(self, job_id: str, version: int) -> str | None:
        row = self.db.execute("SELECT config_text FROM job_configs WHERE job_id = ? AND version = ?",
                              (job_id, version)).fetchone()
        return row[0] if row else None

    def ended_jobs(self, completed_before_ms: int, limit: int) -> list[str]:
        return [r[0] for r in self.db.execute(
            f"SELECT job_id FROM jobs WHERE completed_ms < ? AND state IN {_TERMINAL} ORDER BY completed_ms LIMIT ?",
            (completed_before_ms, limit))]

    def deleted_jobs(self, job_ids: list[str]) -> dict[str, int]:
        return {r[0]: r[1] for chunk in _chunks(list(dict.fromkeys(job_ids))) for r in self.db.execute(
            f"SELECT job_id, deleted_ms FROM deleted_jobs WHERE job_id IN ({','.join('?' * len(chunk))})", chunk)}

    def claim_commands(self, command_ids: list[str], job_ids: list[str], at_ms: int) -> set[str]:
        with self.transaction():
            return {c for c, j in zip(command_ids, job_ids, strict=True) if self.db.execute(
                "INSERT OR IGNORE INTO job_commands (command_id, job_id, at_ms) VALUES (?, ?, ?)",
                (c, j, at_ms)).rowcount}

    def refuse_command(self, command_id: str, job_id: str, pool: str, kind: str, reason: str, at_ms: int) -> None:
        self.db.execute("INSERT OR IGNORE INTO refused_commands (command_id, job_id, pool, kind, reason, at_ms) "
                        "VALUES (?, ?, ?, ?, ?, ?)", (command_id, job_id, pool, kind, reason, at_ms))

    def command_outcome(self, command_id: str) -> dict | None:
        row = self.db.execute("SELECT job_id, pool, kind, reason, at_ms FROM refused_commands WHERE command_id = ?",
                              (command_id,)).fetchone()
        if row:
            return {"state": "refused", **dict(zip(("job_id", "pool", "kind", "reason", "at_ms"), row, strict=True))}
        row = self.db.execute("SELECT job_id, at_ms FROM job_commands WHERE command_id = ?", (command_id,)).fetchone()
        return {"state": "applied", "job_id": row[0], "at_ms": row[1]} if row else None

    def forget_claims(self, now_ms: int) -> int:
        before = now_ms - CLAIMS_KEPT_MS
        with self.transaction():
            gone = self.db.execute("DELETE FROM job_commands WHERE at_ms < ?", (before,)).rowcount
            gone += self.db.execute("DELETE FROM deleted_jobs WHERE deleted_ms < ?", (before,)).rowcount
            return gone + self.db.execute("DELETE FROM refused_commands WHERE at_ms < ?", (before,)).rowcount

    # -- allocations ------------------------------------------------------------------------
    def allocations(self, pools: list[str] | None = None) -> list[Allocation]:
        q = f"SELECT {ALLOCATION_COLS} FROM allocations WHERE released_ms IS NULL"
        if pools is None:
            return [allocation_from_row(r) for r in self._part(ALLOCATIONS).execute(q)]
        return [allocation_from_row(r) for chunk in _chunks(sorted(set(pools)))
                for r in self._part(ALLOCATIONS).execute(f"{q} AND pool IN ({','.join('?' * len(chunk))})", chunk)]

    def release_allocations(self, task_ids: list[str], released_ms: int) -> None:
        if not task_ids:
            return
        with self.transaction():
            # `+`: without it SQLite walks the release index over every held allocation and tests
            # each against the list, rather than finding the listed ones by their key.
            self._part(ALLOCATIONS).execute("UPDATE allocations SET released_ms = ? WHERE task_id IN (SELECT value FROM json_each(?)) "
                            "AND +released_ms IS NULL", (released_ms, json_text(task_ids)))

    def allocation_states(self, task_ids: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for chunk in _chunks(list(task_ids)):
            q = f"SELECT task_id, released_ms FROM allocations WHERE task_id IN ({','.join('?' * len(chunk))})"
            out.update((t, "held" if released is None else "released") for t, released in self._part(ALLOCATIONS).execute(q, chunk))
        return out

    def forget_released_allocations(self, before_ms: int, limit: int) -> int:
        with self.transaction():
            return self._part(ALLOCATIONS).execute("DELETE FROM allocations WHERE task_id IN (SELECT task_id FROM allocations "
                                   "WHERE released_ms < ? LIMIT ?)", (before_ms, limit)).rowcount

    def add_allocations(self, rows: list[Allocation]) -> None:
        with self.transaction():
            self._part(ALLOCATIONS).executemany(
                f"INSERT OR REPLACE INTO allocations ({ALLOCATION_COLS}) VALUES ({_q(ALLOCATION_COLS)})",
                [allocation_params(a) for a in rows],
            )

    def remove_allocations(self, task_ids: list[str]) -> None:
        with self.transaction():
            self._part(ALLOCATIONS).executemany("DELETE FROM allocations WHERE task_id = ?", [(t,) for t in task_ids])

    # -- pool queues ------------------------------------------------------------------------
    def queue_gangs(self, rows: list[QueuedGang]) -> None:
        with self.transaction():
            self._part(ALLOCATIONS).executemany(f"INSERT OR IGNORE INTO queued_gangs ({QUEUED_COLS}) VALUES ({_q(QUEUED_COLS)})",
                                [queued_params(q) for q in rows])

    def queued_gangs(self, pools: list[str] | None = None) -> list[QueuedGang]:
        q = f"SELECT {QUEUED_COLS} FROM queued_gangs WHERE admitted_ms IS NULL"
        if pools is None:
            return [queued_from_row(r) for r in self._part(ALLOCATIONS).execute(f"{q} ORDER BY seq")]
        return sorted((queued_from_row(r) for chunk in _chunks(sorted(set(pools)))
                       for r in self._part(ALLOCATIONS).execute(f"{q} AND pool IN ({','.join('?' * len(chunk))})", chunk)),
                      key=lambda g: g.seq)

    def unsent_admissions(self) -> list[QueuedGang]:
        return [queued_from_row(r) for r in self._part(ALLOCATIONS).execute(
            f"SELECT {QUEUED_COLS}, admitted_ms FROM queued_gangs WHERE admitted_ms IS NOT NULL ORDER BY seq")]

    def admissions_sent(self, gang_ids: list[str]) -> None:
        self.unqueue_gangs(gang_ids)

    def unqueue_gangs(self, gang_ids: list[str]) -> None:
        if not gang_ids:
            return
        with self.transaction():
            self._part(ALLOCATIONS).execute("DELETE FROM queued_gangs WHERE gang_id IN (SELECT value FROM json_each(?))",
                            (json_text(gang_ids),))

    def admit_gangs(self, gang_ids: list[str], allocations: list[Allocation],
                    unqueued: list[Allocation] = ()) -> set[str]:
        with self.transaction():
            if unqueued:
                self.add_allocations(list(unqueued))
            if not gang_ids:
                return set()
            at = int(time.time() * 1000)
            taken = {g for (g,) in self._part(ALLOCATIONS).execute(
                "UPDATE queued_gangs SET admitted_ms = ? WHERE gang_id IN (SELECT value FROM json_each(?)) "
                "AND admitted_ms IS NULL RETURNING gang_id", (at, json_text(gang_ids)))}
            self.add_allocations([a for a in allocations if a.gang_id in taken])
            return taken

    # -- launches ---------------------------------------------------------------------------
    def claim_launches(self, rows: list[Launch]) -> set[str]:
        if not rows:
            return set()
        with self.transaction():
            # One statement text whatever the count (a list of `?` was prepared again per size)
            seen = {r[0] for r in self._part(LAUNCHES).execute(
                "SELECT task_id FROM launches WHERE task_id IN (SELECT value FROM json_each(?))",
                (json_text([r.task_id for r in rows]),))}
            new = [r for r in rows if r.task_id not in seen]
            self._part(LAUNCHES).executemany(
                f"INSERT OR IGNORE INTO launches ({LAUNCH_COLS}) VALUES ({_q(LAUNCH_COLS)})",
                [launch_params(r) for r in new],
            )
        return {r.task_id for r in new}

    def end_launches(self, task_ids: list[str], ended_ms: int, final_status: dict[str, dict] | None = None) -> None:
        final_status = final_status or {}
        with self.transaction():
            self._part(LAUNCHES).executemany(
                "UPDATE launches SET ended_ms = ?, final_status = ? WHERE task_id = ? AND ended_ms IS NULL",
                [(ended_ms, json_text(final_status[t]) if t in final_status else None, t) for t in task_ids],
            )

    def active_launches(self, host_ids: list[str]) -> list[Launch]:
        out = []
        for chunk in _chunks(list(host_ids)):
            q = (f"SELECT {LAUNCH_COLS} FROM launches WHERE ended_ms IS NULL "
                 f"AND host_id IN ({','.join('?' * len(chunk))})")
            out.extend(launch_from_row(r) for r in self._part(LAUNCHES).execute(q, chunk))
        return out

    def set_host_state(self, host_id: str, state: str, at_ms: int) -> None:
        with self.transaction():
            if state == "UP":
                self.db.execute("DELETE FROM host_maintenance WHERE host_id = ?", (host_id,))
            else:
                self.db.execute("INSERT OR REPLACE INTO host_maintenance (host_id, state, updated_ms) VALUES (?, ?, ?)",
                                (host_id, state, at_ms))

    def host_states(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT host_id, state FROM host_maintenance"))

    def add_token(self, row: TokenRow) -> None:
        with self.transaction():
            self.db.execute(f"INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ({_q(TOKEN_COLUMNS)})", token_params(row))

    def get_token(self, token_id: str) -> TokenRow | None:
        row = self.db.execute(f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE token_id = ?", (token_id,)).fetchone()
        return token_from_row(row) if row else None

    def revoke_token(self, token_id: str, at_ms: int) -> bool:
        with self.transaction():
            return self.db.execute("UPDATE tokens SET revoked_ms = ? WHERE token_id = ? AND revoked_ms IS NULL",
                                   (at_ms, token_id)).rowcount > 0

    def list_tokens(self) -> list[TokenRow]:
        return [token_from_row(r) for r in self.db.execute(f"SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_ms")]

    def active_launch_hosts(self) -> list[str]:
        return [r[0] for r in self._part(LAUNCHES).execute("SELECT DISTINCT host_id FROM launches WHERE ended_ms IS NULL")]

    def ended_launches(self, host_ids: list[str], since_ms: int) -> list[dict]:
        out = []
        for chunk in _chunks(list(host_ids)):
            q = (f"SELECT final_status FROM launches WHERE ended_ms >= ? AND final_status IS NOT NULL "
                 f"AND host_id IN ({','.join('?' * len(chunk))}) ORDER BY ended_ms")
            out.extend(json.loads(r[0]) for r in self._part(LAUNCHES).execute(q, (since_ms, *chunk)))
        return out

    def forget_launches(self, now_ms: int, limit: int) -> int:
        with self.transaction():
            return self._part(LAUNCHES).execute("DELETE FROM launches WHERE task_id IN (SELECT task_id FROM launches "
                                   "WHERE ended_ms < ? LIMIT ?)", (now_ms - CLAIMS_KEPT_MS, limit)).rowcount

    def launch_counts(self, job_id: str) -> dict[int, int]:
        q = "SELECT instance, COUNT(*) FROM launches WHERE job_id = ? GROUP BY instance"
        return dict(self._part(LAUNCHES).execute(q, (job_id,)).fetchall())

    def close(self) -> None:
        for db in self._dbs.values():
            db.close()
