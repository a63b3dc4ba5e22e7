"""The Kafka ACLs each component's user gets, derived from topics.yaml: only launch writes
agent-commands, only the API and service producers write job-commands, an agent reads its
commands and writes its reports and nothing else."""

from __future__ import annotations

from peloton.topics import Catalogue
from pelotonctl.principals import STAGES, USERS, Grant, as_user, binding, grants


def who(found: dict[str, list[Grant]], operation: str, topic: str) -> set[str]:
    return {user for user, gs in found.items() for g in gs
            if g.resource == "topic" and g.operation == operation and g.name == topic and not g.prefixed}


def test_only_launch_writes_agent_commands_and_only_the_api_and_producers_write_job_commands() -> None:
    catalogue = Catalogue("t1.")
    found = grants(catalogue)
    assert who(found, "write", "t1.peloton.agent-commands") == {"launch"}
    assert who(found, "write", "t1.peloton.job-commands") == {"api", "producer"}
    # The API reads it only for the time of the oldest unread command (lag in seconds); it holds
    # the store's credentials, and so every job's config, already.
    assert who(found, "read", "t1.peloton.job-commands") == {"admit", "api"}
    assert who(found, "read", "t1.peloton.agent-commands") == {"agent"}
    assert who(found, "write", "t1.peloton.audit") == {"api"}


def test_an_agent_reads_its_commands_and_its_peers_and_writes_its_reports_and_nothing_more() -> None:
    found = grants(Catalogue(""))
    topics = {(g.operation, g.name) for g in found["agent"] if g.resource == "topic"}
    # host-state: its peers, asked in an outage whether they reach the brokers (stages/agent/peers.py).
    assert topics == {("read", "peloton.agent-commands"), ("describe", "peloton.agent-commands"),
                      ("write", "peloton.agent-reports"), ("describe", "peloton.agent-reports"),
                      ("read", "peloton.host-state"), ("describe", "peloton.host-state")}
    assert [g for g in found["agent"] if g.resource == "transactional_id"] == []
    # Placements are what a host manager launches from: an agent may not write them.
    assert who(found, "write", "peloton.placements") == {"place", "entitle", "admit", "api"}
    assert who(found, "write", "peloton.agent-reports") == {"agent"}


def test_every_stage_reads_its_inputs_in_its_own_group_and_fences_with_its_own_transactional_ids() -> None:
    catalogue = Catalogue("p.")
    found = grants(catalogue)
    for stage in STAGES:
        mine = set(found[stage])
        for topic in catalogue.inputs_of(stage):
            assert Grant(stage, "topic", topic.name, "read") in mine, (stage, topic.name)
        assert Grant(stage, "group", "p.peloton." + stage, "read") in mine
        assert Grant(stage, "transactional_id", f"p.peloton.{stage}.", "write", prefixed=True) in mine
        # Nobody's transactions but its own: no other stage's prefix.
        assert not any(g.resource == "transactional_id" and stage not in g.name for g in mine)
    # The API reads the stage groups' offsets and members for lag, and may not join them.
    assert {g for g in found["api"] if g.resource == "group" and not g.prefixed} == {
        Grant("api", "group", f"p.peloton.{stage}", "describe") for stage in STAGES}
    # The producer of a team writes commands and reads nothing.
    assert {g.operation for g in found["producer"]} == {"write", "describe"}


def test_grants_become_allow_acls_for_the_user_and_processes_get_their_user() -> None:
    acl = binding(Grant("launch", "transactional_id", "peloton.launch.", "write", prefixed=True))
    assert acl.principal == "User:launch" and acl.name == "peloton.launch."
    assert str(acl.resource_pattern_type).endswith("PREFIXED") and str(acl.permission_type).endswith("ALLOW")
    assert as_user("agent", {u: "pw" for u in USERS}) == {"PELOTON_KAFKA_USER": "agent", "PELOTON_KAFKA_PASSWORD": "pw"}
    assert as_user("agent", None) == {}


def test_a_watcher_reads_task_statuses_and_nothing_more() -> None:
    found = grants(Catalogue(""))
    assert {(g.operation, g.resource, g.name) for g in found["watcher"]} == {
        ("read", "topic", "peloton.task-status"), ("describe", "topic", "peloton.task-status")}
