"""One host's agent cannot report for another: each report is signed with its host's key, which
the host manager derives from the cluster's agents key and checks (peloton/auth/host_keys.py)."""

from __future__ import annotations

import pytest

from peloton.auth.host_keys import HEADER, HostKeys, host_key, signature, unseal
from peloton.runtime import Record
from peloton.store import open_store
from peloton.topics import partition_for
from stages.launch.stage import LaunchStage
from tests.builders.stages import agent_report, bound

CLUSTER_KEY = "c0ffee" * 8


def signed(report: Record, key: str | None) -> Record:
    headers = ((HEADER, signature(key, report.raw_value)),) if key else ()
    return Record(report.topic, report.partition, report.offset, report.key, report.schema, report.value,
                  report.raw_key, report.raw_value, -1, headers)


@pytest.fixture
def launch(tmp_path):
    store = open_store(tmp_path / "peloton.db")
    stage = LaunchStage(store)
    out = bound(stage, hosts="", agent_heartbeat_s=1.0, agent_report_key=CLUSTER_KEY)
    stage.on_assign([("placements", p) for p in range(4)] + [("agent-reports", p) for p in range(4)])
    yield stage, out
    store.close()


def test_a_report_signed_with_its_hosts_key_joins_the_host(launch) -> None:
    stage, out = launch
    stage.handle([signed(agent_report("h1", [], partition_for("h1", 4)), host_key(CLUSTER_KEY, "h1"))])
    assert "h1" in stage.book.inventory and out.take("dead-letters") == []


def test_an_unsigned_report_or_one_signed_by_another_host_is_dead_lettered_and_changes_nothing(launch) -> None:
    stage, out = launch
    shard = partition_for("victim", 4)
    stage.handle([signed(agent_report("victim", ["x-0-1"], shard), None),
                  signed(agent_report("victim", ["x-0-1"], shard), host_key(CLUSTER_KEY, "attacker")),
                  signed(agent_report("victim", ["x-0-1"], shard), "ab" * 32)])
    assert "victim" not in stage.book.inventory
    reasons = [v["reason"] for _, _, _, v in out.take("dead-letters")]
    assert reasons[0].startswith(
        "agent report: unsigned: a report for host 'victim' must carry its host's signature"), reasons
    assert len(reasons) == 3 and all("not signed with the key of host 'victim'" in r for r in reasons[1:]), reasons


def test_host_keys_differ_by_host_and_by_cluster() -> None:
    assert host_key(CLUSTER_KEY, "a") != host_key(CLUSTER_KEY, "b") != host_key("other", "b")
    keys = HostKeys(CLUSTER_KEY)
    value = b"\x00report"
    assert keys.problem("a", value, signature(host_key(CLUSTER_KEY, "a"), value)) is None
    assert keys.problem("a", value + b"!", signature(host_key(CLUSTER_KEY, "a"), value)) is not None


def test_commands_go_sealed_with_their_hosts_key_and_no_other_host_opens_them(launch) -> None:
    from peloton.serde import registry

    stage, out = launch
    stage.agents.send_command("h1", {"command_id": "c1", "host_id": "h1", "launches": [],
                                     "kills": ["x-0-1"], "sent_ms": 1})
    [(topic, key, schema, value)] = out.take("agent-commands")
    assert (topic, key, schema, value["host_id"]) == ("agent-commands", "h1", "peloton.SealedAgentCommand", "h1")
    assert b"x-0-1" not in value["sealed"]  # nothing of it in the clear
    name, command = registry().decode(unseal(host_key(CLUSTER_KEY, "h1"), "h1", value["sealed"]))
    assert (name, command["kills"]) == ("peloton.AgentCommand", ["x-0-1"])
    for key, host in ((host_key(CLUSTER_KEY, "h2"), "h1"), (host_key(CLUSTER_KEY, "h1"), "h2")):
        with pytest.raises(ValueError, match="not sealed with the key of host"):
            unseal(key, host, value["sealed"])
