"""The SQL stores' schema: numbered migrations (peloton/store/migrations/NNNN_name.sql) that
SQLite and PostgreSQL both apply, each recorded in a schema_version table once applied.

A migration holds its statements part by part (`-- part: NAME` lines; see sql/base.py): a
database that keeps every part (PostgreSQL) applies them all, a SQLite file only its part's, and
records the migration either way, so every file of a store counts the same versions.

A store made before numbered migrations has tables and no schema_version table (SQLite), or a
schema_version table of another shape (PostgreSQL's, which counted the steps of a list in code).
It is adopted as at version 1: 0001's statements, all IF NOT EXISTS, make what it lacks, its
tables are given the columns they gained over time (ADOPTED_COLUMNS), and the later migrations
run as on any store.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from peloton.store.sql.base import MAIN, PARTS
from peloton.store.sql.dialect import Dialect

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
SCHEMA_VERSION = ("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                  "applied_ms BIGINT NOT NULL)")
# Columns tables gained before numbered migrations, which a store made before them may lack.
ADOPTED_COLUMNS = (
    ("jobs", "revocable", "BOOLEAN"), ("jobs", "config_version", "INTEGER"), ("jobs", "rollout", "TEXT"),
    ("tasks", "health", "TEXT"), ("task_events", "host_id", "TEXT"), ("task_events", "message", "TEXT"),
    ("allocations", "released_ms", "BIGINT"), ("allocations", "priority", "INTEGER"),
    ("allocations", "preemptible", "BOOLEAN"), ("allocations", "revocable", "BOOLEAN"),
    ("allocations", "controller", "BOOLEAN"), ("queued_gangs", "admitted_ms", "BIGINT"),
    ("launches", "final_status", "TEXT"),
)
_NAME = re.compile(r"^(\d{4})_(\w+)\.sql$")
_PART = re.compile(r"^--\s*part:\s*(\w+)\s*$")


class Connection(Protocol):
    """A database connection in a transaction (sqlite3's and psycopg's both)."""

    def execute(self, sql: str, params: Sequence = ...) -> Any: ...


@dataclass(frozen=True)
class Migration:
    version: int
    name: str  # the file's name without .sql
    parts: dict[str, tuple[str, ...]]  # part -> its statements, with the dialect's {words}

    def statements(self, dialect: Dialect, part: str | None) -> list[str]:
        """Its statements for one part (None: every part, for a database that keeps them all)."""
        chosen = [self.parts.get(p, ()) for p in PARTS] if part is None else [self.parts.get(part, ())]
        return [dialect.ddl(s) for statements in chosen for s in statements]


def parse(name: str, text: str) -> Migration:
    """A migration file: its number and name from the file name, its statements by part (those
    before any `-- part:` line are MAIN's). Other comment lines are left out; `;` ends a statement."""
    match = _NAME.match(name)
    if not match:
        raise ValueError(f"{name}: a migration is named NNNN_words.sql")
    parts: dict[str, list[str]] = {}
    part, lines = MAIN, list[str]()

    def flush() -> None:
        for statement in "\n".join(lines).split(";"):
            if statement.strip():
                parts.setdefault(part, []).append(statement.strip())
        lines.clear()

    for line in text.splitlines():
        found = _PART.match(line.strip())
        if found:
            flush()
            part = found.group(1)
            if part not in PARTS:
                raise ValueError(f"{name}: no part is named {part!r} (the parts: {', '.join(PARTS)})")
        elif not line.strip().startswith("--"):
            lines.append(line)
    flush()
    return Migration(int(match.group(1)), name.removesuffix(".sql"), {p: tuple(s) for p, s in parts.items()})


def load(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Every migration, in order; their numbers must run 1, 2, 3 ... without a gap."""
    found = sorted((parse(p.name, p.read_text()) for p in directory.glob("*.sql")), key=lambda m: m.version)
    numbers = [m.version for m in found]
    if numbers != list(range(1, len(found) + 1)):
        raise ValueError(f"{directory}: migrations must be numbered 1, 2, 3 ... without a gap, not {numbers}")
    return found


MIGRATIONS = load()
LATEST = MIGRATIONS[-1].version


def migrate(conn: Connection, dialect: Dialect, part: str | None, now_ms: int) -> int:
    """Bring one database to LATEST: a SQLite file of a part, or the database of every part (part
    None). Inside the caller's transaction, which keeps any other process from migrating it at
    the same time. Returns the version it was at before."""
    tables = {r[0] for r in conn.execute(dialect.tables_sql).fetchall()}
    applied: set[int] = set()
    if "schema_version" in tables and "name" in _columns(conn, dialect, "schema_version"):
        applied = {r[0] for r in conn.execute("SELECT version FROM schema_version").fetchall()}
    else:
        if "schema_version" in tables:  # another shape: PostgreSQL's count of the steps of its old list
            conn.execute("DROP TABLE schema_version")
        conn.execute(SCHEMA_VERSION)
        if tables - {"schema_version"}:
            _adopt(conn, dialect, part, tables)
            _record(conn, dialect, MIGRATIONS[0], now_ms)
            applied = {MIGRATIONS[0].version}
    before = max(applied, default=0)
    for migration in MIGRATIONS:
        if migration.version not in applied:
            for statement in migration.statements(dialect, part):
                conn.execute(statement)
            _record(conn, dialect, migration, now_ms)
    return before


def _adopt(conn: Connection, dialect: Dialect, part: str | None, tables: set[str]) -> None:
    """A store made before numbered migrations, brought to version 1 (see the module's doc)."""
    # The columns first: 0001 indexes some of them.
    for table, column, kind in ADOPTED_COLUMNS:
        if table in tables and column not in _columns(conn, dialect, table):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    for statement in MIGRATIONS[0].statements(dialect, part):
        conn.execute(statement)


def _columns(conn: Connection, dialect: Dialect, table: str) -> set[str]:
    return {r[0] for r in conn.execute(dialect.columns_sql, (table,)).fetchall()}


def _record(conn: Connection, dialect: Dialect, migration: Migration, now_ms: int) -> None:
    conn.execute(dialect.compile("INSERT INTO schema_version (version, name, applied_ms) VALUES (?, ?, ?)"),
                 (migration.version, migration.name, now_ms))
