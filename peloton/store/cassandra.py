"""Cassandra backend, Peloton's own store (cassandra-driver: prepared statements, token-aware).

    cassandra://host[:port][,host2[:port]]/keyspace[?replication=SimpleStrategy:1]

The tables (cassandra_schema.py) put each read in one partition. How the contract's guarantees
are kept without SQL transactions (docs/design.md, "Cassandra: batches and claims"):

- transaction(): the writes inside are kept in memory and written when it ends, in phases:
  effects, then job rows, then claims (a command id, a job id), each phase once the one before
  is acknowledged (a partition's writes as one unlogged batch). A crash between two leaves
  effects whose claim is not written: the stage's next owner reads the same records, finds
  nothing claimed and does it again; every effect is an upsert by key, so doing it twice leaves
  what doing it once did. Reads inside see the transaction's own jobs, tasks, updates, configs
  and claims. A transaction that raises writes nothing. Each write carries its own timestamp,
  in the order it was asked for, so a later write of a cell wins whatever request it went in.
- Claims outside a transaction (a job created by create_jobs, a task run launched by
  claim_launches) are lightweight transactions (IF NOT EXISTS) written after their effects.
  Inside a stage's batch, the claim rides in the batch itself: one stage instance owns a job's
  commands (its Kafka partition), and an instance fenced by a rebalance cannot commit its
  output (Kafka's transactional ids), so the store need not arbitrate there.
- Admission charges a gang's tasks and takes the gang off its queue in one conditional batch on
  the pool's partition: both or neither, and only if the gang is still queued.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
import uuid
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import orjson
from cassandra import ConsistencyLevel, Timeout
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.concurrent import execute_concurrent
from cassandra.policies import (
    ConstantReconnectionPolicy,
    DCAwareRoundRobinPolicy,
    TokenAwarePolicy,
)
from cassandra.query import UNSET_VALUE, BatchStatement, BatchType, SimpleStatement, tuple_factory

from peloton.auth.tokens import TokenRow
from peloton.store import masked_url
from peloton.model.states import JOB_TERMINAL, TASK_TERMINAL, UNLAUNCHED
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
from peloton.store.cassandra_schema import (
    BOOTSTRAP,
    BUCKETS,
    MIGRATIONS,
    replication_of,
)
from peloton.store.rows import (
    EVENT_COLS,
    pool_path_range,
    JOB_COLS,
    LAUNCH_COLS,
    QUEUED_COLS,
    TASK_COLS,
    TOKEN_COLUMNS,
    allocation_from_row,
    allocation_params,
    job_from_row,
    job_params,
    json_text,
    launch_from_row,
    launch_params,
    moved_cols,
    queued_from_row,
    task_from_row,
    task_params,
    token_from_row,
    token_params,
)

DEFAULT_PORT = 9042
# A partition's writes in one batch: under 1 MiB (a mutation must fit in half a commit log
# segment, 16 MiB by default; ?batch_kb= changes it).
BATCH_KB = 1024
MAX_STATEMENTS = 1000
IN_KEYS = 100  # partition keys asked for in one request (`IN ?`)
LOCK_TTL_S = 30
CONCURRENCY = 64
TS = object()  # a write's timestamp, filled in when it is sent
EFFECT, JOB_ROW, CLAIM = 0, 1, 2  # the order a transaction's writes go in

# A task's columns but its spec, for reads that do not need it (_light puts None in its place).
TASK_COLS_LIGHT = TASK_COLS.replace(" spec,", "")
_JOB_UPDATE_COLS = ("state", "updated_ms", "completed_ms", "instance_count", "config_text", "config_version", "rollout")
_LEDGER_ALLOCATION = "pool, kind, id, gang_id, cpu, mem_mb, disk_mb, gpu, admitted_ms, priority, preemptible, revocable, controller, released_ms"
_LEDGER_GANG = "pool, kind, id, priority, seq, gang, not_before_ms, admitted_ms"


class _BigBatches(logging.Filter):
    """A partition's writes go in one batch, larger than Cassandra's warning threshold (5 KiB) by
    design: its warning at each one says nothing new."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "exceeding specified threshold" not in message


logging.getLogger("cassandra.protocol").addFilter(_BigBatches())
_TABLE = re.compile(r"\b(FROM|INTO|UPDATE)\s+(\w+)\b")  # where a statement names its table


def _cols(cols: str | tuple) -> list[str]:
    return [c.strip() for c in cols.split(",")] if isinstance(cols, str) else list(cols)


def _insert(table: str, cols: str | tuple) -> str:
    names = _cols(cols)
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) USING TIMESTAMP ?"


def _bucket(key: str) -> int:
    return zlib.crc32(key.encode()) % BUCKETS


def _ended_ttl(r: Launch) -> int:
    """The TTL (seconds) of a launch's rows: CLAIMS_KEPT_MS once it has ended, none before."""
    return CLAIMS_KEPT_MS // 1000 if r.ended_ms is not None else 0


def _day(ms: int) -> int:
    return ms // 86_400_000


def _some(keys: list[str] | None) -> list[str] | None:
    """Partition keys asked for, each once (None: every one)."""
    return None if keys is None else sorted(set(keys))


class _Clock:
    """Write timestamps in microseconds, rising in the order writes are asked for in this process."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def take(self, n: int = 1) -> int:
        with self._lock:
            first = max(time.time_ns() // 1000, self._last + 1)
            self._last = first + n - 1
            return first


@dataclass
class _Tx:
    """A transaction's writes, and what its reads must see of them."""

    writes: list[tuple[int, str, tuple]] = field(default_factory=list)  # (phase, cql, params with TS)
    jobs: dict[str, JobRow | None] = field(default_factory=dict)  # None: deleted
    tasks: dict[tuple[str, int], TaskRow | dict] = field(default_factory=dict)  # a whole row, or columns set
    dropped_jobs: set[str] = field(default_factory=set)  # deleted here: their stored tasks are gone
    commands: set[str] = field(default_factory=set)
    configs: dict[tuple[str, int], str] = field(default_factory=dict)
    updates: dict[str, dict] = field(default_factory=dict)
    unqueued: set[str] = field(default_factory=set)  # gangs taken off their queues here
    on_end: list = field(default_factory=list)  # called however it ends (locks released)


def parse_url(url: str) -> tuple[list[str], int, str, dict[str, str]]:
    """(hosts, port, keyspace, options) of a cassandra:// URL; its user and password, when it names
    them, are in options as "user" and "password"."""
    parts = urlsplit(url)
    keyspace = parts.path.strip("/")
    if parts.scheme != "cassandra" or not parts.netloc or not keyspace.replace("_", "").isalnum():
        raise ValueError(f"PELOTON_STORE={masked_url(url)!r}: a Cassandra store is cassandra://[user:password@]"
                         "host[:port][,host...]/keyspace (the keyspace: letters, digits and _)")
    login, at, netloc = parts.netloc.rpartition("@")
    credentials = {}
    if at:
        user, _, password = login.partition(":")
        credentials = {"user": unquote(user), "password": unquote(password)}
    hosts, ports = [], set()
    for item in netloc.split(","):
        host, _, port = item.partition(":")
        hosts.append(host)
        ports.add(int(port) if port else DEFAULT_PORT)
    if len(ports) > 1:
        raise ValueError(f"PELOTON_STORE={masked_url(url)!r}: every host must use the same CQL port")
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return hosts, ports.pop(), keyspace, {**options, **credentials}


class CassandraStore(StorageGateway):
    def __init__(self, url: str, timeout: float = 10.0):
        self.url = url
        hosts, port, self.keyspace, options = parse_url(url)
        self.batch_bytes = int(options.get("batch_kb", BATCH_KB)) * 1024
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=options.get("dc", ""))),
            consistency_level=ConsistencyLevel.LOCAL_QUORUM, serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL,
            request_timeout=timeout, row_factory=tuple_factory)
        login = ({"auth_provider": PlainTextAuthProvider(options["user"], options["password"])}
                 if "user" in options else {})
        self.cluster = Cluster(hosts, port=port, protocol_version=5, execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                               **login,
                               connect_timeout=5, control_connection_timeout=5,
                               # A node that went away is tried every second, not after a
                               # doubling backoff: a store restarted is used again within seconds.
                               reconnection_policy=ConstantReconnectionPolicy(1.0, max_attempts=None))
        try:
            self.session = self.cluster.connect()
            self.session.execute(f"CREATE KEYSPACE IF NOT EXISTS {self.keyspace} WITH replication = "
                                 f"{replication_of(options.get('replication', 'SimpleStrategy:1'))}")
            # Statements name their keyspace rather than the session USE-ing it: Cassandra 5
            # warns at every statement prepared without one (_p qualifies the tables).
            self._prepared: dict[str, object] = {}
            self._prepare_lock = threading.Lock()
            self._local = threading.local()
            self._clock = _Clock()
            self._event_seq = _Clock()
            self._migrate()
        except BaseException:
            self.cluster.shutdown()
            raise

    # -- plumbing ---------------------------------------------------------------------------
    def _p(self, cql: str):
        stmt = self._prepared.get(cql)
        if stmt is None:
            with self._prepare_lock:
                stmt = self._prepared.get(cql) or self.session.prepare(_TABLE.sub(rf"\1 {self.keyspace}.\2", cql))
                self._prepared[cql] = stmt
        return stmt

    def _rows(self, cql: str, params=()) -> list[tuple]:
        return list(self.session.execute(self._p(cql), params))

    def execute(self, cql: str, params=None):
        """A statement not worth preparing (schema changes, tests' and tools' one-offs), in the
        store's keyspace."""
        return self.session.execute(SimpleStatement(cql, keyspace=self.keyspace), params)

    def _rows_each(self, cql: str, params_list) -> list[tuple]:
        """One query per parameter tuple, run side by side (each to its partition's replica)."""
        params_list = list(params_list)
        if len(params_list) == 1:
            return self._rows(cql, params_list[0])
        stmt = self._p(cql)
        out: list[tuple] = []
        for ok, result in execute_concurrent(self.session, [(stmt, p) for p in params_list], CONCURRENCY,
                                             raise_on_first_error=True):
            out.extend(result)
        return out

    def _rows_in(self, cql: str, keys) -> list[tuple]:
        """A query `... WHERE key IN ?` for many partition keys, IN_KEYS to a request: a request per
        key cost the stages more CPU in the driver than the queries cost Cassandra."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        return self._rows_each(cql, [(keys[k:k + IN_KEYS],) for k in range(0, len(keys), IN_KEYS)])

    def _applied_each(self, cql: str, params_list) -> list[bool]:
        """Lightweight transactions, side by side: whether each was applied."""
        stmt = self._p(cql)
        results = execute_concurrent(self.session, [(stmt, p) for p in params_list], CONCURRENCY,
                                     raise_on_first_error=True)
        return [bool(result.one()[0]) for ok, result in results]

    def _tx(self) -> _Tx | None:
        return getattr(self._local, "tx", None)

    def _write(self, cql: str, params_list, phase: int = EFFECT) -> None:
        """Upserts and deletes (their CQL with USING TIMESTAMP ?, TS in their parameters):
        kept for the end of the transaction, or written now."""
        writes = [(phase, cql, tuple(p)) for p in params_list]
        if not writes:
            return
        tx = self._tx()
        if tx is not None:
            tx.writes.extend(writes)
        else:
            self._send(writes)

    def _send(self, writes: list[tuple[int, str, tuple]]) -> None:
        """Stamp writes in the order given, then send them phase by phase: a phase's writes go
        side by side, as one batch per partition (a single-partition batch is one mutation on its
        replica), and the next phase starts when every one of them is acknowledged."""
        first = self._clock.take(len(writes))
        by_phase: dict[int, dict[bytes, list]] = {}
        for i, (phase, cql, params) in enumerate(writes):
            bound = self._p(cql).bind(tuple(first + i if v is TS else v for v in params))
            by_phase.setdefault(phase, {}).setdefault(bound.routing_key, []).append(bound)
        for phase in sorted(by_phase):
            batches = []
            # (Writes of many partitions in one unlogged batch, to save the driver's cost per
            # request, timed out on a loaded node again and again: one request per partition.)
            for statements in by_phase[phase].values():
                for k in range(0, len(statements), MAX_STATEMENTS):
                    batches.extend(self._batches(statements[k:k + MAX_STATEMENTS]))
            execute_concurrent(self.session, [(b, None) for b in batches], CONCURRENCY, raise_on_first_error=True)

    def _batches(self, statements: list) -> list:
        """One partition's writes: a statement alone, or unlogged batches under batch_bytes (a
        mutation must fit in half a commit log segment)."""
        limit = self.batch_bytes
        if len(statements) == 1:
            return statements
        out, batch, size = [], BatchStatement(BatchType.UNLOGGED), 0
        for bound in statements:
            cost = 32 + sum(len(v) for v in bound.values if isinstance(v, bytes))
            if size and size + cost > limit:
                out.append(batch)
                batch, size = BatchStatement(BatchType.UNLOGGED), 0
            batch.add(bound)
            size += cost
        out.append(batch)
        return out

    @contextmanager
    def transaction(self):
        """Writes inside are sent when it ends (see the module's doc); nested calls join it."""
        if self._tx() is not None:
            yield self
            return
        tx = self._local.tx = _Tx()
        try:
            yield self
            self._local.tx = None
            if tx.writes:
                self._send(tx.writes)
        finally:
            self._local.tx = None
            for release in tx.on_end:
                release()

    def _lock(self, name: str, timeout: float = 15.0) -> str:
        """A lease on a lock row (a lightweight transaction; it lapses after LOCK_TTL_S if its
        holder dies). Returns the owner id that unlocks it."""
        owner = uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._applied_each(f"INSERT INTO locks (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL {LOCK_TTL_S}",
                                      [(name, owner)])[0]:
                    return owner
            except Timeout:
                # A Paxos round that timed out may still have applied: the row says whose it is.
                rows = self._rows_serial("SELECT owner FROM locks WHERE name = ?", (name,))
                if rows and rows[0][0] == owner:
                    return owner
            if time.monotonic() > deadline:
                raise TimeoutError(f"the store's {name} lock is held by another process (it lapses {LOCK_TTL_S}s "
                                   "after its holder stops)")
            time.sleep(0.1)

    def _unlock(self, name: str, owner: str) -> None:
        self._applied_each("DELETE FROM locks WHERE name = ? IF owner = ?", [(name, owner)])

    def _migrate(self) -> None:
        if self._schema_version_or_none() == len(MIGRATIONS):
            return  # the common case, a stage starting on a made schema: no lock, no Paxos round
        for cql in BOOTSTRAP:
            self.execute(cql)
        owner = self._lock("schema", timeout=120.0)
        try:
            current = self.schema_version
            for version, statements in enumerate(MIGRATIONS[current:], start=current + 1):
                for cql in statements:
                    self.execute(cql)
                self.execute("INSERT INTO schema_version (name, version) VALUES ('peloton', %s)", (version,))
        finally:
            self._unlock("schema", owner)

    def _schema_version_or_none(self) -> int | None:
        made = self.session.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s "
                                    "AND table_name = 'schema_version'", (self.keyspace,)).one()
        return self.schema_version if made else None

    @property
    def schema_version(self) -> int:
        rows = self._rows("SELECT version FROM schema_version WHERE name = 'peloton'")
        return rows[0][0] if rows else 0

    # -- pools ------------------------------------------------------------------------------
    def put_pool(self, path: str, config: dict) -> None:
        self._write(_insert("pools", "bucket, path, config, updated_ms"),
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

    # -- jobs -------------------------------------------------------------------------------
    def _job_writes(self, jobs: list[JobRow], created: bool) -> None:
        """A job's row (whole when created, what may change when updated) and its index rows."""
        if created:
            self._write(_insert("jobs", JOB_COLS), [(*job_params(j), TS) for j in jobs], JOB_ROW)
            self._write(_insert("jobs_by_day", "day, created_ms, job_id"),
                        [(_day(j.created_ms), j.created_ms, j.job_id, TS) for j in jobs], JOB_ROW)
            self._write(_insert("job_days", "bucket, day"),
                        [(0, day, TS) for day in {_day(j.created_ms) for j in jobs}], JOB_ROW)
        else:
            sets = ", ".join(f"{c} = ?" for c in _JOB_UPDATE_COLS)
            self._write(f"UPDATE jobs USING TIMESTAMP ? SET {sets} WHERE job_id = ?",
                        [(TS, j.state, j.updated_ms, j.completed_ms, j.instance_count, j.config_text,
                          j.config_version, json_text(j.rollout) if j.rollout else None, j.job_id) for j in jobs], JOB_ROW)
        self._write(_insert("active_jobs", "bucket, job_id, pool"),
                    [(_bucket(j.job_id), j.job_id, j.pool, TS) for j in jobs if j.state not in JOB_TERMINAL], JOB_ROW)
        self._write("DELETE FROM active_jobs USING TIMESTAMP ? WHERE bucket = ? AND job_id = ?",
                    [(TS, _bucket(j.job_id), j.job_id) for j in jobs if j.state in JOB_TERMINAL], JOB_ROW)

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
            self._write(_insert("job_claims", "job_id, at_ms"), [(j, int(time.time() * 1000), TS) for j in new], CLAIM)
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
        ask = []
        for j in dict.fromkeys(job_ids):
            if tx is not None and j in tx.jobs:
                if tx.jobs[j] is not None:
                    out[j] = dataclasses.replace(tx.jobs[j])
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

    def list_jobs(self, limit: int = 100, *, states: list[str] | None = None, pool: str | None = None,
                  owner: str | None = None, name: str | None = None, created_since_ms: int | None = None,
                  oldest_first: bool = False) -> list[JobRow]:
        """Day by day from the newest, each day's jobs newest first, until `limit` match (from the
        oldest, each day's oldest first, with oldest_first); only the days from created_since_ms on."""
        out: list[JobRow] = []
        order = "ASC" if oldest_first else "DESC"
        since = -1 if created_since_ms is None else created_since_ms
        for (day,) in self._rows(f"SELECT day FROM job_days WHERE bucket = 0 AND day >= ? ORDER BY day {order}",
                                 (_day(max(since, 0)),)):
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
            tx.jobs[job_id] = None
            tx.dropped_jobs.add(job_id)
            for key in [k for k in tx.tasks if k[0] == job_id]:
                del tx.tasks[key]
            for table in ("tasks", "task_events", "job_configs", "updates_by_job", "launches_by_job"):
                self._write(f"DELETE FROM {table} USING TIMESTAMP ? WHERE job_id = ?", [(TS, job_id)])
            self._write("DELETE FROM updates USING TIMESTAMP ? WHERE update_id = ?", [(TS, u) for _c, u in updates])
            self._write("DELETE FROM jobs_by_day USING TIMESTAMP ? WHERE day = ? AND created_ms = ? AND job_id = ?",
                        [(TS, _day(job.created_ms), job.created_ms, job_id)])
            self._write("DELETE FROM active_jobs USING TIMESTAMP ? WHERE bucket = ? AND job_id = ?",
                        [(TS, _bucket(job_id), job_id)], JOB_ROW)
            self._write("DELETE FROM jobs USING TIMESTAMP ? WHERE job_id = ?", [(TS, job_id)], JOB_ROW)
            self._write("DELETE FROM job_claims USING TIMESTAMP ? WHERE job_id = ?", [(TS, job_id)], CLAIM)
            self._write(_insert("deleted_jobs", "job_id, deleted_ms"), [(job_id, at_ms, TS)], CLAIM)
        return True

    def ended_jobs(self, completed_before_ms: int, limit: int) -> list[str]:
        """A job ended before a time was created before it: the days up to that one, oldest first."""
        out: list[str] = []
        for (day,) in self._rows("SELECT day FROM job_days WHERE bucket = 0 AND day <= ? ORDER BY day ASC",
                                 (_day(completed_before_ms),)):
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

    # -- tasks ------------------------------------------------------------------------------
    def _task_writes(self, tasks: list[TaskRow], full: bool, same_run: bool = False, new: bool = False) -> None:
        """Task rows (whole, or the columns a status moves) and then their index rows.

        A null written is a tombstone that every read of the job's tasks reads back (Cassandra
        warned of 2,000 per 1,000 rows: exit code and signal at each status). Where the column
        can hold nothing to clear, a None is left unset: a new task's, and the exit code and
        signal of a run moving between states that are not its end."""
        if full:
            rows = [(*task_params(t), TS) for t in tasks]
            self._write(_insert("tasks", TASK_COLS), [_unset_nulls(r) for r in rows] if new else rows)
        else:
            cols = moved_cols(same_run)
            sets = ", ".join(f"{c} = ?" for c in cols)
            self._write(f"UPDATE tasks USING TIMESTAMP ? SET {sets} WHERE job_id = ? AND instance = ?",
                        [(TS, *(UNSET_VALUE if same_run and v is None and c in _END_COLS and t.state not in TASK_TERMINAL
                                else v for c in cols for v in (getattr(t, c),)), t.job_id, t.instance)
                         for t in tasks])
        self._write(_insert("tasks_by_state", "state, bucket, job_id, instance"),
                    [(t.state, _bucket(t.job_id), t.job_id, t.instance, TS) for t in tasks if t.state in INDEXED_STATES])
        self._write(_insert("tasks_by_host", "host_id, job_id, instance"),
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
        out = {}
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
        check, and by dashboards, where reading whole rows cost Cassandra most of its CPU."""
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

    def _indexed(self, table: str, column: str, index: list[tuple], key_cols: str, key_of) -> list[TaskRow]:
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
        found = {}
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
                              lambda state, j, i: (state, _bucket(j), j, i))
        hits = [t for t in tasks if t.state in states and t.updated_ms < updated_before_ms]
        return sorted(hits, key=lambda t: t.updated_ms)[:limit]

    def tasks_on_hosts(self, host_ids: list[str], states: list[str]) -> list[TaskRow]:
        index = self._rows_each("SELECT host_id, job_id, instance FROM tasks_by_host WHERE host_id = ?",
                                [(h,) for h in dict.fromkeys(host_ids)])
        tasks = self._indexed("tasks_by_host", "host_id", index, "host_id = ? AND job_id = ? AND instance = ?",
                              lambda host, j, i: (host, j, i))
        hosts = set(host_ids)
        return sorted((t for t in tasks if t.host_id in hosts and t.state in states), key=lambda t: (t.job_id, t.instance))

    # -- task events ------------------------------------------------------------------------
    def record_task_events(self, events: list[tuple]) -> None:
        if not events:
            return
        first = self._event_seq.take(len(events))
        cols = ("job_id", "seq", *(c for c in EVENT_COLS if c != "job_id"))
        self._write(_insert("task_events", cols),
                    [(e[1], first + n, *(v for c, v in zip(EVENT_COLS, e, strict=True) if c != "job_id"), TS)
                     for n, e in enumerate(events)])

    def task_events(self, job_id: str) -> list[dict]:
        rows = self._rows(f"SELECT {', '.join(EVENT_COLS)} FROM task_events WHERE job_id = ?", (job_id,))
        return [dict(zip(EVENT_COLS, r, strict=True)) for r in rows]

    # -- job commands -----------------------------------------------------------------------
    def claim_commands(self, command_ids: list[str], job_ids: list[str], at_ms: int) -> set[str]:
        pairs = dict(zip(command_ids, job_ids, strict=True))
        if not pairs:
            return set()
        tx = self._tx()
        if tx is None:
            applied = self._applied_each("INSERT INTO job_commands (command_id, job_id, at_ms) VALUES (?, ?, ?) "
                                         "IF NOT EXISTS", [(c, j, at_ms) for c, j in pairs.items()])
            return {c for c, ok in zip(pairs, applied, strict=True) if ok}
        known = {r[0] for r in self._rows_in("SELECT command_id FROM job_commands WHERE command_id IN ?", pairs)}
        new = {c: j for c, j in pairs.items() if c not in known and c not in tx.commands}
        tx.commands |= set(new)
        self._write(_insert("job_commands", "command_id, job_id, at_ms"), [(c, j, at_ms, TS) for c, j in new.items()],
                    CLAIM)
        return set(new)

    def refuse_command(self, command_id: str, job_id: str, pool: str, kind: str, reason: str, at_ms: int) -> None:
        self._write(_insert("refused_commands", "command_id, job_id, pool, kind, reason, at_ms"),
                    [(command_id, job_id, pool, kind, reason, at_ms, TS)])

    def command_outcome(self, command_id: str) -> dict | None:
        rows = self._rows("SELECT job_id, pool, kind, reason, at_ms FROM refused_commands WHERE command_id = ?",
                          (command_id,))
        if rows:
            return {"state": "refused", **dict(zip(("job_id", "pool", "kind", "reason", "at_ms"), rows[0], strict=True))}
        rows = self._rows("SELECT job_id, at_ms FROM job_commands WHERE command_id = ?", (command_id,))
        return {"state": "applied", "job_id": rows[0][0], "at_ms": rows[0][1]} if rows else None

    def forget_claims(self, now_ms: int) -> int:
        return 0  # the tables' default_time_to_live drops them (cassandra_schema, versions 2 and 3)

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
        self._write(_insert("ledger_index", "id, pool"), [(f"{kind}:{i}", pool, TS) for i, pool in rows])
        self._write(_insert("ledger_pools", "bucket, pool"), [(0, pool, TS) for pool in {p for _i, p in rows}])

    def allocations(self, pools: list[str] | None = None) -> list[Allocation]:
        cols = "id, pool, gang_id, cpu, mem_mb, disk_mb, gpu, admitted_ms, priority, preemptible, revocable, " \
               "controller, released_ms"
        return [allocation_from_row(r) for r in self._ledger("a", cols, _some(pools)) if r[12] is None]

    def add_allocations(self, rows: list[Allocation]) -> None:
        self._index_ledger("a", [(a.task_id, a.pool) for a in rows])
        self._write(_insert("pool_ledger", _LEDGER_ALLOCATION), [_allocation_params(a) + (TS,) for a in rows])

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
        self._write(_insert("pool_ledger", _LEDGER_GANG),
                    [(q.pool, "g", q.gang_id, q.priority, q.seq, json_text(q.gang), q.not_before_ms, 0, TS) for q in new])

    def _gangs(self, admitted: bool, pools: list[str] | None = None) -> list[QueuedGang]:
        rows = self._ledger("g", f"{QUEUED_COLS.replace('gang_id', 'id')}, admitted_ms", pools)
        return sorted((queued_from_row(r) for r in rows if bool(r[6]) == admitted), key=lambda q: q.seq)

    def queued_gangs(self, pools: list[str] | None = None) -> list[QueuedGang]:
        return self._gangs(admitted=False, pools=_some(pools))

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
                    unqueued: list[Allocation] = ()) -> set[str]:
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

    def _rows_serial(self, cql: str, params) -> list[tuple]:
        """A read that sees every lightweight transaction applied before it (SERIAL)."""
        stmt = self._p(cql).bind(params)
        stmt.consistency_level = ConsistencyLevel.LOCAL_SERIAL
        return list(self.session.execute(stmt))

    # -- launches: by host -------------------------------------------------------------------
    # An ended run's rows expire CLAIMS_KEPT_MS after it ended, so a host's partition holds the
    # runs of that long. Its rows are written again at its end with the TTL: an UPDATE's TTL would
    # reach only the cells it sets, never the row. (TTL 0 is none: a run not ended.)
    def _launch_rows(self, rows: list[Launch], final_status: dict[str, dict]) -> None:
        """A run's row in its host's launches and in its job's, whole, with its TTL."""
        self._write(f"INSERT INTO launches ({LAUNCH_COLS}, final_status) VALUES ({', '.join('?' * 12)}) "
                    "USING TIMESTAMP ? AND TTL ?",
                    [(*launch_params(r), json_text(final_status[r.task_id]) if r.task_id in final_status else None,
                      TS, _ended_ttl(r)) for r in rows])
        self._write("INSERT INTO launches_by_job (job_id, task_id, instance) VALUES (?, ?, ?) "
                    "USING TIMESTAMP ? AND TTL ?", [(r.job_id, r.task_id, r.instance, TS, _ended_ttl(r)) for r in rows])

    def claim_launches(self, rows: list[Launch]) -> set[str]:
        """The launch rows first (the same whoever wins), then a claim per task run. A run claimed
        already keeps its rows: written again, an ended run's would start again (and lose their TTL)."""
        rows = list({r.task_id: r for r in rows}.values())
        claimed = {t for (t,) in self._rows_in("SELECT task_id FROM launch_claims WHERE task_id IN ?",
                                               [r.task_id for r in rows])}
        rows = [r for r in rows if r.task_id not in claimed]
        if not rows:
            return set()
        with self.transaction():
            self._launch_rows(rows, {})
            self._write(_insert("active_launches", "bucket, host_id, task_id"),
                        [(0, r.host_id, r.task_id, TS) for r in rows if r.ended_ms is None])
        applied = self._applied_each("INSERT INTO launch_claims (task_id, host_id) VALUES (?, ?) IF NOT EXISTS "
                                     "USING TTL ?", [(r.task_id, r.host_id, _ended_ttl(r)) for r in rows])
        return {r.task_id for r, ok in zip(rows, applied, strict=True) if ok}

    def end_launches(self, task_ids: list[str], ended_ms: int, final_status: dict[str, dict] | None = None) -> None:
        final_status = final_status or {}
        hosts = dict(self._rows_in("SELECT task_id, host_id FROM launch_claims WHERE task_id IN ?", task_ids))
        by_host: dict[str, list[str]] = {}
        for t, h in hosts.items():
            by_host.setdefault(h, []).append(t)
        running = [launch_from_row(r) for r in self._rows_each(
            f"SELECT {LAUNCH_COLS} FROM launches WHERE host_id = ? AND task_id IN ?",
            list(by_host.items())) if r[10] is None] if by_host else []
        for r in running:
            r.ended_ms = ended_ms
        with self.transaction():
            self._launch_rows(running, final_status)
            self._write("INSERT INTO launch_claims (task_id, host_id) VALUES (?, ?) USING TIMESTAMP ? AND TTL ?",
                        [(r.task_id, r.host_id, TS, _ended_ttl(r)) for r in running])
            self._write("DELETE FROM active_launches USING TIMESTAMP ? WHERE bucket = 0 AND host_id = ? AND task_id = ?",
                        [(TS, r.host_id, r.task_id) for r in running])

    def active_launches(self, host_ids: list[str]) -> list[Launch]:
        rows = self._rows_each(f"SELECT {LAUNCH_COLS} FROM launches WHERE host_id = ?",
                               [(h,) for h in dict.fromkeys(host_ids)]) if host_ids else []
        return [launch_from_row(r) for r in rows if r[10] is None]

    def active_launch_hosts(self) -> list[str]:
        return list(dict.fromkeys(r[0] for r in self._rows("SELECT host_id FROM active_launches WHERE bucket = 0")))

    def ended_launches(self, host_ids: list[str], since_ms: int) -> list[dict]:
        rows = self._rows_each("SELECT ended_ms, final_status FROM launches WHERE host_id = ?",
                               [(h,) for h in dict.fromkeys(host_ids)]) if host_ids else []
        return [orjson.loads(s) for _e, s in sorted(r for r in rows if r[0] is not None and r[0] >= since_ms and r[1])]

    def forget_launches(self, now_ms: int, limit: int) -> int:
        return 0  # an ended run's rows carry their TTL (end_launches)

    def launch_counts(self, job_id: str) -> dict[int, int]:
        counts: dict[int, int] = {}
        for (instance,) in self._rows("SELECT instance FROM launches_by_job WHERE job_id = ?", (job_id,)):
            counts[instance] = counts.get(instance, 0) + 1
        return counts

    def set_host_state(self, host_id: str, state: str, at_ms: int) -> None:
        if state == "UP":
            self._write("DELETE FROM host_maintenance USING TIMESTAMP ? WHERE bucket = 0 AND host_id = ?",
                        [(TS, host_id)])
        else:
            self._write(_insert("host_maintenance", "bucket, host_id, state, updated_ms"), [(0, host_id, state, at_ms, TS)])

    def host_states(self) -> dict[str, str]:
        return dict(self._rows("SELECT host_id, state FROM host_maintenance WHERE bucket = 0"))

    # -- update workflows and config versions ------------------------------------------------
    def save_updates(self, updates: list[dict]) -> None:
        tx = self._tx()
        if tx is not None:
            tx.updates.update({u["update_id"]: orjson.loads(json_text(u)) for u in updates})
        self._write(_insert("updates", "update_id, job_id, state, body, created_ms"),
                    [(u["update_id"], u["job_id"], u["state"], json_text(u), u["created_ms"], TS) for u in updates])
        self._write(_insert("updates_by_job", "job_id, created_ms, update_id"),
                    [(u["job_id"], u["created_ms"], u["update_id"], TS) for u in updates])

    def get_update(self, update_id: str) -> dict | None:
        tx = self._tx()
        if tx is not None and update_id in tx.updates:
            return orjson.loads(json_text(tx.updates[update_id]))
        rows = self._rows("SELECT body FROM updates WHERE update_id = ?", (update_id,))
        return orjson.loads(rows[0][0]) if rows else None

    def updates_of_job(self, job_id: str) -> list[dict]:
        ids = [r[0] for r in self._rows("SELECT update_id FROM updates_by_job WHERE job_id = ?", (job_id,))]
        bodies = dict(self._rows_in("SELECT update_id, body FROM updates WHERE update_id IN ?", ids))
        return [orjson.loads(bodies[u]) for u in ids if u in bodies]

    def save_job_configs(self, rows: list[tuple[str, int, str, int]]) -> None:
        """A version stored stays as it was (one writer per job: its job manager)."""
        tx = self._tx()
        new = [r for r in rows if self.job_config(r[0], r[1]) is None]
        new = list({(r[0], r[1]): r for r in reversed(new)}.values())
        if tx is not None:
            tx.configs.update({(j, v): text for j, v, text, _at in new})
        self._write(_insert("job_configs", "job_id, version, config_text, created_ms"), [(*r, TS) for r in new])

    def job_config(self, job_id: str, version: int) -> str | None:
        tx = self._tx()
        if tx is not None and (job_id, version) in tx.configs:
            return tx.configs[(job_id, version)]
        rows = self._rows("SELECT config_text FROM job_configs WHERE job_id = ? AND version = ?", (job_id, version))
        return rows[0][0] if rows else None

    # -- tokens -----------------------------------------------------------------------------
    def add_token(self, row: TokenRow) -> None:
        self._write(_insert("tokens", f"bucket, {TOKEN_COLUMNS}"), [(0, *token_params(row), TS)])

    def get_token(self, token_id: str) -> TokenRow | None:
        rows = self._rows(f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE bucket = 0 AND token_id = ?", (token_id,))
        return token_from_row(rows[0]) if rows else None

    def revoke_token(self, token_id: str, at_ms: int) -> bool:
        if self.get_token(token_id) is None:
            return False
        return self._applied_each("UPDATE tokens SET revoked_ms = ? WHERE bucket = 0 AND token_id = ? "
                                  "IF revoked_ms = null", [(at_ms, token_id)])[0]

    def list_tokens(self) -> list[TokenRow]:
        rows = self._rows(f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE bucket = 0")
        return sorted((token_from_row(r) for r in rows), key=lambda t: t.created_ms)

    def close(self) -> None:
        self.cluster.shutdown()


_END_COLS = ("exit_code", "signal")  # set once, at a run's end


def _unset_nulls(params: tuple) -> tuple:
    return tuple(UNSET_VALUE if v is None else v for v in params)


def _light(row) -> TaskRow:
    """A task from TASK_COLS_LIGHT: its spec not read (None)."""
    return task_from_row((*row[:7], None, *row[7:]))


def _allocation_params(a: Allocation) -> tuple:
    """pool_ledger's columns of an allocation (_LEDGER_ALLOCATION), held (released_ms null)."""
    (task_id, pool, gang_id, cpu, mem, disk, gpu, admitted, priority, preemptible, revocable,
     controller) = allocation_params(a)
    return (pool, "a", task_id, gang_id, cpu, mem, disk, gpu, admitted, priority, preemptible, revocable, controller,
            None)
