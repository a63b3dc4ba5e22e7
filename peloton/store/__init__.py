"""The storage gateway: one interface (StorageGateway), one backend per database, chosen by URL.

    sqlite:///path/peloton.db or a plain path   embedded SQLite (one machine; the default)
    postgresql://user@host:port/db               PostgreSQL (several machines)
    cassandra://host:port[,host:port]/keyspace   Cassandra, Peloton's own store (several machines;
        ?replication=SimpleStrategy:1 by default, NetworkTopologyStrategy:dc1=3,dc2=3 in production)

The store is the source of truth for jobs, tasks, pools, pool allocations and launches; stage
memory is rebuilt from it (and from compacted topics) on start and on partition assignment.
Every backend is held to one contract suite (tests/unit/peloton/store/test_store.py). SQLite and PostgreSQL are
one SQL store (peloton/store/sql) over a dialect each, with one schema in numbered migrations
(peloton/store/migrations).
"""

from __future__ import annotations

import importlib
import re
import sqlite3
import sys
from pathlib import Path

from peloton.store.base import (
    CLAIMS_KEPT_MS,
    Allocation,
    AllocationStore,
    JobRow,
    JobStore,
    Launch,
    LaunchStore,
    QueryStore,
    QueuedGang,
    StorageGateway,
    TaskEvent,
    TaskRow,
)

# Errors that mean the store is unavailable (locked, disk full, server gone), not that a request
# was wrong: stages pause and try again rather than blame the record. By the module that defines
# them: a backend's driver is imported only when a store of its kind is opened (a fifth of a
# second for a command line that needs neither), and a driver never imported raised nothing.
_BACKEND_ERRORS = {
    "psycopg": ("OperationalError",),
    "psycopg_pool": ("PoolTimeout",),
    "cassandra": ("Unavailable", "Timeout", "OperationTimedOut", "CoordinationFailure"),
    "cassandra.cluster": ("NoHostAvailable",),
}


def store_unavailable(every_backend: bool = False) -> tuple[type[BaseException], ...]:
    """The errors meaning the store is unavailable, of the drivers imported so far (for an
    `except` clause, evaluated as it matches); every_backend imports them all (for handlers
    registered once, before any store is opened)."""
    kinds: list[type[BaseException]] = [sqlite3.OperationalError]
    for module, names in _BACKEND_ERRORS.items():
        loaded = importlib.import_module(module) if every_backend else sys.modules.get(module)
        if loaded is not None:
            kinds.extend(getattr(loaded, name) for name in names)
    return tuple(kinds)


def masked_url(url: str) -> str:
    """A store URL without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


POSTGRES_SCHEMES = ("postgresql://", "postgres://")
CASSANDRA_SCHEME = "cassandra://"


def sqlite_path(url_or_path: str | Path) -> Path | None:
    """The file of an SQLite store, or None for a store that is not a file."""
    target = str(url_or_path)
    if target.startswith((*POSTGRES_SCHEMES, CASSANDRA_SCHEME)) or "://" in target and not target.startswith("sqlite:///"):
        return None
    return Path(target[len("sqlite:///") - 1:] if target.startswith("sqlite:///") else target)


def open_store(url_or_path: str | Path, statement_timeout_s: float | None = None) -> StorageGateway:
    """The store at a URL or path. statement_timeout_s bounds each statement on PostgreSQL's side
    (a caller that gives up waiting leaves nothing running); Cassandra's driver bounds every
    request already (10 s), and SQLite is a local file."""
    target = str(url_or_path)
    if target.startswith(POSTGRES_SCHEMES):
        from peloton.store.postgres import PostgresStore

        return PostgresStore(target, statement_timeout_s=statement_timeout_s)
    if target.startswith(CASSANDRA_SCHEME):
        from peloton.store.cassandra import CassandraStore

        return CassandraStore(target)
    path = sqlite_path(target)
    if path is None:
        raise ValueError(f"PELOTON_STORE={target!r}: a store is postgresql://user@host:port/db, "
                         f"cassandra://host:port/keyspace, sqlite:///path or a file path")
    from peloton.store.sqlite import SqliteStore

    return SqliteStore(path)


__all__ = ["CLAIMS_KEPT_MS", "Allocation", "AllocationStore", "JobRow", "JobStore", "Launch", "LaunchStore",
           "QueryStore", "QueuedGang", "StorageGateway", "TaskEvent", "TaskRow", "masked_url", "open_store",
           "sqlite_path", "store_unavailable"]
