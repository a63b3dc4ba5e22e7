"""Shared test helpers: where Peloton's example files live, and a real PostgreSQL server."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Peloton's own example job, pool and stateless-spec files, unchanged (their NOTICE says whence):
# kept in the repository so that every clone tests them, wherever it lives.
EXAMPLES = REPO / "tests" / "fixtures" / "peloton-examples"
STORES = ["sqlite", "postgres", "cassandra"]
# STORES as the parameters of a test: the ones a server holds are marked servers (`make unit`
# leaves them out).
STORE_PARAMS = [kind if kind == "sqlite" else pytest.param(kind, marks=pytest.mark.servers) for kind in STORES]


def pytest_collection_modifyitems(items) -> None:
    """Tests marked long (a minute or so each) go first. `make test` runs two workers that take
    work from each other's queues (pytest-xdist's worksteal); the long ones started last would
    leave one worker running alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture
def peloton_examples() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def postgres_server():
    """One throwaway PostgreSQL server for the session, started on first use. Not installed is
    an error, not a skip: `make test` installs it (Debian's postgresql package)."""
    from pelotonctl.dev.postgres import PostgresUnavailable, start_postgres
    from pelotonctl.dev.stack import free_port

    try:
        server = start_postgres(free_port())
    except PostgresUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def cassandra_node(tmp_path_factory):
    """One Cassandra node for the session (from the jars `make jars` fetched), started on first
    use: it takes 10-30 s to start, so every test that needs one shares it."""
    from pelotonctl.dev.cassandra import CassandraError, CassandraNode

    node = CassandraNode.create(tmp_path_factory.mktemp("cassandra"))
    try:
        node.start()
    except CassandraError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield node
    node.stop()


@pytest.fixture(scope="session")
def cassandra_keyspace(cassandra_node):
    """One keyspace for the session's Cassandra stores, its schema made once (4 s); each test
    empties its tables instead (under a second)."""
    from peloton.store import open_store

    url = cassandra_node.store_url("peloton_tests")
    store = open_store(url)
    keep = {"schema_version", "locks"}
    tables = [r[0] for r in store.execute(
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = 'peloton_tests'") if r[0] not in keep]

    def empty() -> str:
        for table in tables:
            store.execute(f"TRUNCATE {table}")
        return url

    yield empty
    store.close()


def fresh_store_url(request, kind: str, tmp_path: Path) -> str:
    """A new, empty store of the given kind ("sqlite", "postgres" or "cassandra")."""
    if kind == "postgres":
        return request.getfixturevalue("postgres_server").create_database()
    if kind == "cassandra":
        return request.getfixturevalue("cassandra_keyspace")()
    return str(tmp_path / "peloton.db")
