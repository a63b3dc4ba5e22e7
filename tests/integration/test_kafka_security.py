"""A Kafka nobody enters without a name: the session's broker (secure, as the dev stack's) refuses
clients without credentials, and each component's user may do only its part: an agent cannot
write job commands, nobody but the host manager writes agent commands."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from peloton.runtime import kafka_access
from peloton.topics import Catalogue
from tests.integration.conftest import Pipeline


def produce(config: dict, topic: str, timeout: float = 8.0) -> str:
    """What became of one message: "delivered", or the error that stopped it."""
    errors: list[str] = []
    results: list = []
    producer = Producer({**config, "message.timeout.ms": int(timeout * 1000), "log_level": 0,
                         "error_cb": lambda e: errors.append(e.str())})
    producer.produce(topic, key=b"k", value=b"v", on_delivery=lambda err, _m: results.append(err))
    producer.flush(timeout + 2)
    if results and results[0] is None:
        return "delivered"
    return " / ".join([str(results[0]) if results else "undelivered", *errors[:1]])


def as_component(p: Pipeline, user: str) -> dict:
    env = p.as_user(user)
    return {**kafka_access(p.settings), "sasl.username": env["PELOTON_KAFKA_USER"],
            "sasl.password": env["PELOTON_KAFKA_PASSWORD"]}


@pytest.mark.long
def test_without_a_name_nothing_is_written_and_each_user_writes_only_its_own_topics(pipeline_factory) -> None:
    p = pipeline_factory()
    assert p.settings.kafka_user, "the session's broker runs without security"
    topics = Catalogue(p.settings.topic_prefix)
    job_commands, agent_commands = topics["job-commands"].name, topics["agent-commands"].name

    # No credentials: the plaintext handshake fails on the SASL_SSL listener, nothing is written.
    for topic in (job_commands, agent_commands):
        assert produce({"bootstrap.servers": p.settings.bootstrap}, topic) != "delivered"
    # A wrong password is refused by name.
    wrong = {**as_component(p, "agent"), "sasl.password": "not-it"}
    assert "Authentication failed" in produce(wrong, topics["placements"].name)

    agent = as_component(p, "agent")
    assert "TOPIC_AUTHORIZATION_FAILED" in produce(agent, job_commands)
    assert "TOPIC_AUTHORIZATION_FAILED" in produce(agent, agent_commands)
    assert produce(agent, topics["agent-reports"].name) == "delivered"  # its reports
    assert "TOPIC_AUTHORIZATION_FAILED" in produce(agent, topics["placements"].name)  # what launch acts on
    for user in ("admit", "entitle", "place", "api", "producer"):
        assert "TOPIC_AUTHORIZATION_FAILED" in produce(as_component(p, user), agent_commands), user
    assert produce(as_component(p, "launch"), agent_commands) == "delivered"
    assert produce(as_component(p, "producer"), job_commands) == "delivered"
    assert "TOPIC_AUTHORIZATION_FAILED" in produce(as_component(p, "launch"), job_commands)


@pytest.mark.long
def test_each_components_user_writes_and_reads_only_what_its_role_needs(pipeline_factory) -> None:
    """Every component's user against every topic, both ways: what it may do is exactly what
    topics.yaml's written_by and read_by give it (`pelotonctl topics acls`), and the broker refuses
    the rest. An agent writes its reports, not the placements a host manager acts on."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from pelotonctl.principals import USERS, grants

    p = pipeline_factory()
    catalogue = Catalogue(p.settings.topic_prefix)
    found = grants(catalogue)
    names = [t.name for t in catalogue]
    for user in USERS:
        may = {(g.operation, g.name) for g in found[user] if g.resource == "topic" and not g.prefixed}
        results: dict[str, object] = {}
        producer = Producer({**as_component(p, user), "message.timeout.ms": 8000, "log_level": 0})
        for name in names:
            producer.produce(name, key=b"k", value=b"not a record",
                             on_delivery=lambda err, _m, n=name, results=results: results.__setitem__(n, err))
        producer.flush(15)
        wrote = {n for n, err in results.items() if err is None}
        assert wrote == {n for n in names if ("write", n) in may}, (user, sorted(wrote))
        refused = {n for n, err in results.items() if err is not None and "AUTHORIZATION" in str(err)}
        assert refused == set(names) - wrote, (user, {n: str(e) for n, e in results.items()})
        # A group the user may use, so that the group's refusal does not hide the topics' (the
        # producer's user has none: it reads nothing).
        group = next((g.name + ("x" if g.prefixed else "") for g in found[user] if g.resource == "group"), "none")
        consumer = Consumer({**as_component(p, user), "group.id": group, "enable.auto.commit": False,
                             "log_level": 0})
        # A topic the user may not even describe is refused at its metadata; one it may describe
        # but not read, at its first fetch.
        denied = {n for n in names if consumer.list_topics(n, timeout=10).topics[n].error is not None}
        consumer.assign([TopicPartition(n, 0, OFFSET_BEGINNING) for n in names if n not in denied])
        unreadable = {n for n in names if ("read", n) not in may}
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and denied != unreadable:
            for msg in consumer.consume(100, 0.5):
                if msg.error() is not None and msg.error().name() == "TOPIC_AUTHORIZATION_FAILED":
                    denied.add(msg.topic())
        consumer.close()
        assert denied == unreadable, (user, sorted(denied))
