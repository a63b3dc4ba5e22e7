"""What a cassandra:// store URL says: hosts, port, keyspace and the keyspace's replication."""

from __future__ import annotations

import pytest

from peloton.store.cassandra import parse_url
from peloton.store.cassandra_schema import replication_of


def test_a_url_names_hosts_one_port_a_keyspace_and_options() -> None:
    assert parse_url("cassandra://c1:9142,c2:9142/peloton?replication=SimpleStrategy:3&dc=dc1") == (
        ["c1", "c2"], 9142, "peloton", {"replication": "SimpleStrategy:3", "dc": "dc1"})
    assert parse_url("cassandra://c1/peloton")[1] == 9042  # CQL's port unless named


def test_a_url_may_name_the_role_the_store_logs_in_as_and_messages_never_show_its_password() -> None:
    assert parse_url("cassandra://peloton:s%40cret@c1:9142,c2:9142/ks") == (
        ["c1", "c2"], 9142, "ks", {"user": "peloton", "password": "s@cret"})
    with pytest.raises(ValueError) as refused:
        parse_url("cassandra://peloton:hunter2@c1:1,c2:2/ks")
    assert "hunter2" not in str(refused.value) and "peloton:***@" in str(refused.value)


@pytest.mark.parametrize("url, says", [
    ("cassandra://c1:1,c2:2/peloton", "same CQL port"),
    ("cassandra://c1:9042/", "keyspace"),
    ("cassandra://c1:9042/drop table;", "keyspace"),
])
def test_a_url_that_cannot_work_says_why(url, says) -> None:
    with pytest.raises(ValueError, match=says):
        parse_url(url)


def test_replication_is_simple_on_one_machine_and_per_data_centre_in_production() -> None:
    assert replication_of("SimpleStrategy:1") == "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    assert replication_of("NetworkTopologyStrategy:dc1=3,dc2=2") == (
        "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 2}")
    for bad in ("NetworkTopologyStrategy:dc1", "Everywhere:3"):
        with pytest.raises(ValueError, match="replication="):
            replication_of(bad)
