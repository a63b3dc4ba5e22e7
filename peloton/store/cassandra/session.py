"""The Cassandra store's connection and plumbing: its URL, prepared statements, write
timestamps, transactions (writes kept and sent in phases when one ends), the schema lock and its
migrations. The role mixins (jobs.py, tasks.py, ...) read and write through these."""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Self
from urllib.parse import parse_qs, unquote, urlsplit

from cassandra import ConsistencyLevel, Timeout
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, ResultSet
from cassandra.concurrent import execute_concurrent
from cassandra.policies import (
    ConstantReconnectionPolicy,
    DCAwareRoundRobinPolicy,
    TokenAwarePolicy,
)
from cassandra.query import BatchStatement, BatchType, BoundStatement, PreparedStatement, SimpleStatement, tuple_factory

from peloton.store import masked_url
from peloton.store.base import JobRow, TaskRow
from peloton.store.cassandra_schema import (
    BOOTSTRAP,
    BUCKETS,
    MIGRATIONS,
    replication_of,
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


def insert_cql(table: str, cols: str | tuple) -> str:
    names = _cols(cols)
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) USING TIMESTAMP ?"


def bucket_of(key: str) -> int:
    return zlib.crc32(key.encode()) % BUCKETS


def day_of(ms: int) -> int:
    return ms // 86_400_000


def distinct(keys: list[str] | None) -> list[str] | None:
    """Partition keys asked for, each once (None: every one)."""
    return None if keys is None else sorted(set(keys))


class Clock:
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
class Tx:
    """A transaction's writes, and what its reads must see of them."""

    writes: list[tuple[int, str, tuple]] = field(default_factory=list)  # (phase, cql, params with TS)
    jobs: dict[str, JobRow | None] = field(default_factory=dict)  # None: deleted
    tasks: dict[tuple[str, int], TaskRow | dict] = field(default_factory=dict)  # a whole row, or columns set
    dropped_jobs: set[str] = field(default_factory=set)  # deleted here: their stored tasks are gone
    commands: set[str] = field(default_factory=set)
    configs: dict[tuple[str, int], str] = field(default_factory=dict)
    updates: dict[str, dict] = field(default_factory=dict)
    unqueued: set[str] = field(default_factory=set)  # gangs taken off their queues here
    on_end: list[Callable[[], None]] = field(default_factory=list)  # called however it ends (locks released)


def parse_url(url: str) -> tuple[list[str], int, str, dict[str, str]]:
    """(hosts, port, keyspace, options) of a cassandra:// URL; its user and password, when it names
    them, are in options as "user" and "password"."""
    parts = urlsplit(url)
    keyspace = parts.path.strip("/")
    if parts.scheme != "cassandra" or not parts.netloc or not keyspace.replace("_", "").isalnum():
        raise ValueError(f"PELOTON_STORE={masked_url(url)!r}: a Cassandra store is cassandra://[user:password@]"
                         "host[:port][,host...]/keyspace (the keyspace: letters, digits and _)")
    login, at, netloc = parts.netloc.rpartition("@")
    credentials: dict[str, str] = {}
    if at:
        user, _, password = login.partition(":")
        credentials = {"user": unquote(user), "password": unquote(password)}
    hosts: list[str] = []
    ports: set[int] = set()
    for item in netloc.split(","):
        host, _, port = item.partition(":")
        hosts.append(host)
        ports.add(int(port) if port else DEFAULT_PORT)
    if len(ports) > 1:
        raise ValueError(f"PELOTON_STORE={masked_url(url)!r}: every host must use the same CQL port")
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return hosts, ports.pop(), keyspace, {**options, **credentials}


class CassandraSession:
    """A session on the store's keyspace, its schema made: what every role mixin builds on."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
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
            self._prepared: dict[str, PreparedStatement] = {}
            self._prepare_lock = threading.Lock()
            self._local = threading.local()
            self._clock = Clock()
            self._event_seq = Clock()
            self._migrate()
        except BaseException:
            self.cluster.shutdown()
            raise

    # -- plumbing ---------------------------------------------------------------------------
    def _p(self, cql: str) -> PreparedStatement:
        stmt = self._prepared.get(cql)
        if stmt is None:
            with self._prepare_lock:
                stmt = self._prepared.get(cql) or self.session.prepare(_TABLE.sub(rf"\1 {self.keyspace}.\2", cql))
                self._prepared[cql] = stmt
        return stmt

    def _rows(self, cql: str, params: Sequence = ()) -> list[tuple]:
        return list(self.session.execute(self._p(cql), params))

    def execute(self, cql: str, params: Sequence | None = None) -> ResultSet:
        """A statement not worth preparing (schema changes, tests' and tools' one-offs), in the
        store's keyspace."""
        return self.session.execute(SimpleStatement(cql, keyspace=self.keyspace), params)

    def _rows_each(self, cql: str, params_list: Iterable[Sequence]) -> list[tuple]:
        """One query per parameter tuple, run side by side (each to its partition's replica)."""
        params_list = list(params_list)
        if len(params_list) == 1:
            return self._rows(cql, params_list[0])
        stmt = self._p(cql)
        out: list[tuple] = []
        for _ok, result in execute_concurrent(self.session, [(stmt, p) for p in params_list], CONCURRENCY,
                                             raise_on_first_error=True):
            out.extend(result)
        return out

    def _rows_in(self, cql: str, keys: Iterable[str]) -> list[tuple]:
        """A query `... WHERE key IN ?` for many partition keys, IN_KEYS to a request: a request per
        key costs the stages more CPU in the driver than the queries cost Cassandra."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        return self._rows_each(cql, [(keys[k:k + IN_KEYS],) for k in range(0, len(keys), IN_KEYS)])

    def _applied_each(self, cql: str, params_list: Iterable[Sequence]) -> list[bool]:
        """Lightweight transactions, side by side: whether each was applied."""
        stmt = self._p(cql)
        results = execute_concurrent(self.session, [(stmt, p) for p in params_list], CONCURRENCY,
                                     raise_on_first_error=True)
        return [bool(result.one()[0]) for ok, result in results]

    def _tx(self) -> Tx | None:
        return getattr(self._local, "tx", None)

    def _write(self, cql: str, params_list: Iterable[Sequence], phase: int = EFFECT) -> None:
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
        by_phase: dict[int, dict[bytes, list[BoundStatement]]] = {}
        for i, (phase, cql, params) in enumerate(writes):
            bound = self._p(cql).bind(tuple(first + i if v is TS else v for v in params))
            by_phase.setdefault(phase, {}).setdefault(bound.routing_key, []).append(bound)
        for phase in sorted(by_phase):
            batches: list[BoundStatement | BatchStatement] = []
            # One request per partition: an unlogged batch of many partitions, which would save
            # the driver's cost per request, times out on a loaded node.
            for statements in by_phase[phase].values():
                for k in range(0, len(statements), MAX_STATEMENTS):
                    batches.extend(self._batches(statements[k:k + MAX_STATEMENTS]))
            execute_concurrent(self.session, [(b, None) for b in batches], CONCURRENCY, raise_on_first_error=True)

    def _batches(self, statements: list[BoundStatement]) -> list[BoundStatement | BatchStatement]:
        """One partition's writes: a statement alone, or unlogged batches under batch_bytes (a
        mutation must fit in half a commit log segment)."""
        limit = self.batch_bytes
        if len(statements) == 1:
            return statements
        out: list[BoundStatement | BatchStatement] = []
        batch, size = BatchStatement(BatchType.UNLOGGED), 0
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
    def transaction(self) -> Iterator[Self]:
        """Writes inside are sent when it ends (see the package's doc); nested calls join it."""
        if self._tx() is not None:
            yield self
            return
        tx = self._local.tx = Tx()
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
                if self._applied_each("INSERT INTO locks (name, owner) VALUES (?, ?) IF NOT EXISTS "
                                      f"USING TTL {LOCK_TTL_S}", [(name, owner)])[0]:
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

    def _rows_serial(self, cql: str, params: Sequence) -> list[tuple]:
        """A read that sees every lightweight transaction applied before it (SERIAL)."""
        stmt = self._p(cql).bind(params)
        stmt.consistency_level = ConsistencyLevel.LOCAL_SERIAL
        return list(self.session.execute(stmt))

    def close(self) -> None:
        self.cluster.shutdown()
