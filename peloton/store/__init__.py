"""The storage gateway: one interface (StorageGateway), one backend per database.

The store is the source of truth for jobs, tasks, pools, pool allocations and launches; stage
memory is rebuilt from it (and from compacted topics) on start and on partition assignment.
"""

from __future__ import annotations

import sqlite3

from peloton.store.base import Allocation, JobRow, Launch, StorageGateway, TaskRow

# Errors that mean the store is unavailable (locked, disk full, server gone), not that a request
# was wrong: stages pause and try again rather than blame the record. Each backend adds its own.
STORE_UNAVAILABLE: tuple[type[BaseException], ...] = (sqlite3.OperationalError,)


def open_store(url_or_path) -> StorageGateway:
    """`sqlite:///path`, or a plain path, opens the embedded SQLite backend."""
    target = str(url_or_path)
    if target.startswith("cassandra://"):
        raise NotImplementedError("the Cassandra backend arrives with the job manager issue")
    if target.startswith("sqlite:///"):
        target = target[len("sqlite:///") - 1 :]
    from peloton.store.sqlite import SqliteStore

    return SqliteStore(target)


__all__ = ["STORE_UNAVAILABLE", "Allocation", "JobRow", "Launch", "StorageGateway", "TaskRow", "open_store"]
