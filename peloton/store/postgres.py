"""PostgreSQL backend, for stages on several machines (psycopg 3 with a connection pool).

The store itself is the one SQL store (sql/store.py); this class gives it PostgreSQL's
connections, transactions and locks. Every statement is parametrised. Where two instances could
race, the database decides: create_jobs and claim_launches insert with ON CONFLICT DO NOTHING
and return what they inserted, so a job is created once and a task run launched once whoever
asks. The schema is migrated (sql/migrate.py) under an advisory lock, so two processes starting
at once do not both apply a migration.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg_pool import ConnectionPool

from peloton.store.sql.base import MAIN
from peloton.store.sql.dialect import POSTGRES
from peloton.store.sql.migrate import migrate
from peloton.store.sql.store import SqlStore

_MIGRATION_LOCK = 0x70656C6F  # any constant shared by every process of the project
_POOL_TREE_LOCK = 0x706F6F6C


class PostgresStore(SqlStore):
    dialect = POSTGRES

    def __init__(self, url: str, min_size: int = 1, max_size: int = 4, timeout: float = 5.0,
                 statement_timeout_s: float | None = None):
        self.url = url
        # statement_timeout_s: the server gives up a statement after that long (a caller that
        # waits a bounded time, as the API does, leaves nothing running behind it); the schema's
        # migration, which may wait for another process's lock, is exempt.
        bounded = {"options": f"-c statement_timeout={int(statement_timeout_s * 1000)}"} if statement_timeout_s else {}
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
                                           "tcp_user_timeout": 10_000, **bounded},
                                   open=True, name="peloton-store")
        self._local = threading.local()  # the connection of the transaction this thread is in
        self.pool.wait(timeout)
        with self.transaction() as conn:
            conn.execute("SET LOCAL statement_timeout = 0")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            migrate(conn, POSTGRES, None, int(time.time() * 1000))

    @property
    def schema_version(self) -> int:
        return self._rows(MAIN, "SELECT max(version) FROM schema_version")[0][0]

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
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
    def _conn(self) -> Iterator[psycopg.Connection]:
        """The current transaction's connection, or a pooled one for a single statement."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
        else:
            with self.pool.connection() as conn:
                yield conn

    # -- how the SQL store's statements run (the part is PostgreSQL's one database) ------------
    def _rows(self, part: str, sql: str, params: Sequence = ()) -> list[tuple]:
        with self._conn() as conn:
            return conn.execute(sql, params).fetchall()

    def _count(self, part: str, sql: str, params: Sequence = ()) -> int:
        with self._conn() as conn:
            return conn.execute(sql, params).rowcount

    def _many(self, part: str, sql: str, rows: list[tuple]) -> None:
        if rows:
            with self._conn() as conn, conn.cursor() as cur:
                cur.executemany(sql, rows)

    def _insert_new(self, part: str, known_sql: str, insert_sql: str, rows: list[tuple]) -> set:
        new: set = set()
        if not rows:
            return new
        with self.transaction() as conn, conn.cursor() as cur:
            cur.executemany(insert_sql, rows, returning=True)
            while True:  # one result per statement; a row that was there returns none
                new.update(row[0] for row in cur.fetchall())
                if not cur.nextset():
                    break
        return new

    def lock_pool_tree(self) -> None:
        self._rows(MAIN, "SELECT pg_advisory_xact_lock(%s)", (_POOL_TREE_LOCK,))

    def close(self) -> None:
        self.pool.close()
