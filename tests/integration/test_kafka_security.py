"""A Kafka nobody enters without a name: the session's broker (secure, as the dev stack's) refuses
clients without credentials, and each component's user may do only its part: an agent cannot
write job commands, nobody but the host manager writes agent commands."""

from __future__ import annotations

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
    assert produce(agent, topics["placements"].name) == "delivered"  # its reports
    for user in ("admit", "entitle", "place", "api", "producer"):
        assert "TOPIC_AUTHORIZATION_FAILED" in produce(as_component(p, user), agent_commands), user
    assert produce(as_component(p, "launch"), agent_commands) == "delivered"
    assert produce(as_component(p, "producer"), job_commands) == "delivered"
    assert "TOPIC_AUTHORIZATION_FAILED" in produce(as_component(p, "launch"), job_commands)
