"""The PostgreSQL and Cassandra stores' schemas: versioned, and each migration applied once
(on a real server and node)."""

from __future__ import annotations

import pytest

from peloton.store import open_store

pytestmark = pytest.mark.servers


def test_the_postgres_schema_is_versioned_and_migrated_once(postgres_server) -> None:
    from peloton.store.sql.migrate import LATEST, MIGRATIONS

    url = postgres_server.create_database()
    first, second = open_store(url), open_store(url)  # the second finds the schema made
    try:
        assert first.schema_version == second.schema_version == LATEST
        with first.transaction() as conn:
            assert conn.execute("SELECT version, name FROM schema_version ORDER BY version").fetchall() == [
                (m.version, m.name) for m in MIGRATIONS]
    finally:
        first.close()
        second.close()


def test_the_cassandra_schema_is_versioned_and_migrated_once(cassandra_node) -> None:
    import uuid

    from peloton.store.cassandra_schema import MIGRATIONS

    url = cassandra_node.store_url(f"t_{uuid.uuid4().hex[:8]}")
    first, second = open_store(url), open_store(url)  # the second finds the schema made
    try:
        assert first.schema_version == second.schema_version == len(MIGRATIONS)
        assert first.execute("SELECT owner FROM locks WHERE name = 'schema'").one() is None  # unlocked
        first.execute(f"DROP KEYSPACE {first.keyspace}")
    finally:
        first.close()
        second.close()
