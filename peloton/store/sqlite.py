"""Embedded SQLite backend: files shared by every process of a dev stack (WAL mode).

The store itself is the one SQL store (sql/store.py); this class gives it SQLite's files,
connections and transactions.

A SQLite file has one write lock. With every table in one file, each stage's write waited for
the others': in the bench's steady minute the job manager held it a third of the time, and
entitle and launch each waited 3-5 s for it, in waits of up to a quarter of a second per batch.
So the tables a stage alone writes on every batch live in a file of their own (a part, sql/base.py):
entitle's allocations and queues in `<name>.allocations.db`, launch's claims in
`<name>.launches.db`, and everything else in the file named. A transaction takes each part's
write lock when it first touches that part, so a batch of entitle or launch never waits for the
job manager's. No transaction writes two parts (each part is one stage's), so nothing needs to
be atomic across files. Each file is migrated on its own (sql/migrate.py); a file made when every
table was in it has the parts' tables moved out the first time it is opened."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from peloton.store.sql.base import ALLOCATIONS, LAUNCHES, MAIN, PARTS
from peloton.store.sql.dialect import SQLITE
from peloton.store.sql.migrate import migrate
from peloton.store.sql.store import SqlStore

__all__ = ["ALLOCATIONS", "LAUNCHES", "MAIN", "PARTS", "SqliteStore", "part_path", "store_files"]

# The tables of each part but MAIN: what a file made before the parts has moved out of it.
PART_TABLES = {ALLOCATIONS: ("allocations", "queued_gangs"), LAUNCHES: ("launches",)}


def part_path(path: Path, part: str) -> Path:
    """The file of a part: MAIN's is the one named, the others' `<name>.<part><suffix>`."""
    return path if part == MAIN else path.with_name(f"{path.stem}.{part}{path.suffix}")


def store_files(path: Path) -> list[Path]:
    """Every file of the store named `path`: each part's, with its WAL and shared memory."""
    return [Path(f"{part_path(path, part)}{suffix}") for part in PARTS for suffix in ("", "-wal", "-shm")]


class SqliteStore(SqlStore):
    dialect = SQLITE

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._depth = 0
        self._owner = 0  # the thread whose transaction is open
        self._begun: list[str] = []  # the parts whose write lock that transaction holds
        self._dbs = {part: self._connect(self.part_path(part)) for part in PARTS}
        for part in PARTS:
            with self.transaction():
                migrate(self._part(part), SQLITE, part, int(time.time() * 1000))
        self._move_parts_out()

    def part_path(self, part: str) -> Path:
        return part_path(self.path, part)

    @property
    def schema_version(self) -> int:
        """The migrations every file of the store has had."""
        return min(self._dbs[part].execute("SELECT max(version) FROM schema_version").fetchone()[0] for part in PARTS)

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
        db = self._dbs[MAIN]
        if not db.execute(f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name IN "
                          f"({', '.join('?' * len(old))})", old).fetchone():
            return
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
                        db.execute(f"INSERT OR IGNORE INTO part_{part}.{table} ({cols}) "
                                   f"SELECT {cols} FROM main.{table}")
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
    def transaction(self) -> Iterator[SqliteStore]:
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

    # -- how the SQL store's statements run -------------------------------------------------
    def _rows(self, part: str, sql: str, params: Sequence = ()) -> list[tuple]:
        return self._part(part).execute(sql, params).fetchall()

    def _count(self, part: str, sql: str, params: Sequence = ()) -> int:
        return self._part(part).execute(sql, params).rowcount

    def _many(self, part: str, sql: str, rows: list[tuple]) -> None:
        if rows:
            with self.transaction():  # in autocommit mode, each row would be a transaction of its own
                self._part(part).executemany(sql, rows)

    def _insert_new(self, part: str, known_sql: str, insert_sql: str, rows: list[tuple]) -> set:
        # sqlite3's executemany drops what RETURNING returns: the keys there already are read
        # first instead, under the part's write lock, so no other writer comes between.
        with self.transaction():
            db = self._part(part)
            known = {r[0] for r in db.execute(known_sql, (SQLITE.list_param(r[0] for r in rows),))}
            new = [r for r in rows if r[0] not in known]
            db.executemany(insert_sql, new)
        return {r[0] for r in new}

    def lock_pool_tree(self) -> None:
        self._part(MAIN)  # in a transaction, the first touch of the pools' file takes its write lock

    def close(self) -> None:
        for db in self._dbs.values():
            db.close()
