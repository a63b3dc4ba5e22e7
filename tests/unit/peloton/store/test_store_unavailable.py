"""Which failures mean the store is away (the batch is tried again, a command line says so in one
line) while each backend's driver is imported only when a store of its kind is opened."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from peloton.config import REPO_ROOT
from peloton.runtime.errors import RecordError, is_transient
from peloton.store import store_unavailable


def test_a_command_line_and_a_stage_load_no_driver_of_a_store_they_do_not_open() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, pelotonctl.cli.main, stages.run, peloton.store; print(sorted(m for m "
                               "in ('psycopg', 'psycopg_pool', 'cassandra') if m in sys.modules))"],
        capture_output=True, text=True, check=True, cwd=str(REPO_ROOT)).stdout.strip()
    assert loaded == "[]"


def test_each_backends_unavailable_errors_are_transient_once_its_driver_is_loaded() -> None:
    import cassandra
    import cassandra.cluster
    import psycopg
    import psycopg_pool

    assert is_transient(sqlite3.OperationalError("database is locked"))
    assert is_transient(psycopg.OperationalError("connection refused"))
    assert is_transient(psycopg_pool.PoolTimeout("no connection in 5 s"))
    assert is_transient(cassandra.cluster.NoHostAvailable("none", {}))
    assert is_transient(cassandra.OperationTimedOut())
    assert not is_transient(RecordError("a bad record"))
    assert not is_transient(psycopg.errors.UniqueViolation("a duplicate key"))  # a programming error, not an outage
    assert set(store_unavailable()) == set(store_unavailable(every_backend=True))


def test_every_backend_gives_its_errors_to_handlers_registered_before_any_store_is_opened() -> None:
    names = {kind.__name__ for kind in store_unavailable(every_backend=True)}
    assert {"OperationalError", "PoolTimeout", "NoHostAvailable", "Unavailable", "Timeout", "OperationTimedOut",
            "CoordinationFailure"} <= names
