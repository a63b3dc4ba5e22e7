"""Apache Cassandra 5 assembled from its Maven Central jars and started the way its own scripts
start it (pelotonctl/dev/cassandra.py): the CQL port answers DataStax's Python driver,
lightweight transactions claim a row once, and a SIGKILLed node started again on its folder
still has every write it acknowledged."""

from __future__ import annotations

import signal
import uuid

import pytest

pytestmark = pytest.mark.integration


def session_of(node):
    return node.session()


def test_a_node_from_jars_answers_cql_claims_once_and_keeps_its_writes_across_a_sigkill(cassandra_node) -> None:
    node = cassandra_node
    keyspace = f"t_{uuid.uuid4().hex[:8]}"
    cluster, session = session_of(node)
    try:
        assert session.execute("SELECT release_version FROM system.local").one().release_version.startswith("5.0")
        session.execute(f"CREATE KEYSPACE {keyspace} WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        session.execute(f"CREATE TABLE {keyspace}.claims (id text PRIMARY KEY, owner text)")
        claim = session.prepare(f"INSERT INTO {keyspace}.claims (id, owner) VALUES (?, ?) IF NOT EXISTS")
        assert session.execute(claim, ("job-1", "admit-0")).one().applied
        second = session.execute(claim, ("job-1", "admit-1")).one()
        assert not second.applied and second.owner == "admit-0"  # the claim says who holds it
    finally:
        cluster.shutdown()

    node.kill(signal.SIGKILL)
    assert node.pid() is None
    node.start()  # on the same folder: the commit log is replayed
    cluster, session = session_of(node)
    try:
        row = session.execute(f"SELECT owner FROM {keyspace}.claims WHERE id = 'job-1'").one()
        assert row is not None and row.owner == "admit-0"
    finally:
        cluster.shutdown()
    assert node.log.read_text().count("Starting listening for CQL clients") == 2


def test_a_client_without_the_nodes_passwords_is_refused(cassandra_node) -> None:
    """Clients log in (PasswordAuthenticator): none without a password, nor with Cassandra's
    well-known default superuser's, which the node changed at its first start."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster, NoHostAvailable

    for login in ({}, {"auth_provider": PlainTextAuthProvider("cassandra", "cassandra")}):
        cluster = Cluster(["127.0.0.1"], port=cassandra_node.native_port, protocol_version=5, **login)
        try:
            with pytest.raises(NoHostAvailable) as refused:
                cluster.connect()
            assert "Authentication" in str(refused.value) or "authenticat" in str(refused.value).lower()
        finally:
            cluster.shutdown()
    cluster, session = cassandra_node.session()  # the store's own role logs in
    try:
        assert session.execute("SELECT release_version FROM system.local").one() is not None
    finally:
        cluster.shutdown()
