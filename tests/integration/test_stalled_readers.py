"""Readers of assigned partitions that stop fetching are replaced, on the real broker.

librdkafka's assigned consumers have been seen to fetch nothing after every broker restarted
(peloton/runtime/stall.py): in CI a host agent read no command for three minutes after the
three-broker cluster came back, and its job never ran. A restart cannot make that happen on
demand; a paused consumer fetches nothing in the same way, and is what these tests stall."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_END, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from peloton.config import Settings
from peloton.model.resources import Resources
from peloton.runtime import CompactedView, kafka_access
from peloton.runtime.stall import EndsAside, ReaderWatch
from peloton.serde import registry
from peloton.topics import Catalogue, apply_topics, partition_for

pytestmark = pytest.mark.integration

QUICK = {"after_s": 2.0, "every_s": 0.5}  # the watch's figures, shortened for a test


@pytest.fixture
def settings(broker, tmp_path) -> Settings:
    """The broker's settings under a topic prefix of this test's own, its topics made."""
    settings = Settings(**broker, topic_prefix=f"stall-{uuid.uuid4().hex[:6]}.", home=str(tmp_path))
    apply_topics(AdminClient(kafka_access(settings)), Catalogue(settings.topic_prefix), fix=True)
    return settings


def host_state(host_id: str) -> bytes:
    return registry().encode("peloton.HostState", {
        "host_id": host_id, "shard": 0, "driver": "sim", "state": "UP", "capacity": Resources(cpu=8).to_record(),
        "allocated": Resources().to_record(), "task_count": 0, "updated_ms": 1})


def test_a_view_whose_reader_stops_fetching_gets_a_new_one_that_goes_on_from_where_it_was(settings) -> None:
    catalogue = Catalogue(settings.topic_prefix)
    topic = catalogue["host-state"].name
    producer = Producer(kafka_access(settings))
    view = CompactedView(settings, "host-state", catalogue)
    try:
        view.reader = ReaderWatch(topic, view.reader.partitions, view.reader.ends, **QUICK)
        # Reading all along: records come and go, and the reader is never judged stalled.
        for i in range(8):
            producer.produce(topic, key=f"h{i}".encode(), value=host_state(f"h{i}"))
            producer.flush(10)
            deadline = time.monotonic() + 0.6
            while time.monotonic() < deadline:
                view.poll(timeout=0.1)
        assert set(view.values) == {f"h{i}" for i in range(8)}
        assert view.reader.renewals == 0
        # Stalled: nothing is fetched while a record waits; the new reader reads it, and the
        # values read before are kept.
        view.consumer.pause(view.consumer.assignment())
        producer.produce(topic, key=b"late", value=host_state("late"))
        producer.flush(10)
        deadline = time.monotonic() + 20
        while "late" not in view.values and time.monotonic() < deadline:
            view.poll(timeout=0.1)
        assert "late" in view.values, "the stalled view never read the record that waited"
        assert view.reader.renewals == 1
        assert len(view.values) == 9
    finally:
        view.close()


def test_an_agent_whose_command_reader_stops_fetching_gets_a_new_one_and_runs_the_launch(settings) -> None:
    from stages.agent.agent import AgentSpec, HostAgent

    agent = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4, mem_mb=1024, disk_mb=1024), {})], simulate=True)
    try:
        agent.start()
        agent.reader = ReaderWatch(agent.commands.name, agent.reader.partitions, agent.reader.ends, **QUICK)
        # The reader in place, and the watch's first look taken (a reader with no position is
        # judged from the first end the watch saw, so that look must come before the command).
        settle_until = time.monotonic() + 2
        while time.monotonic() < settle_until:
            agent.step()
        agent.consumer.pause(agent.consumer.assignment())
        command = registry().encode("peloton.AgentCommand", {
            "command_id": "c1", "host_id": "h1", "kills": [], "sent_ms": int(time.time() * 1000), "launches": [{
                "task_id": "j-0-1", "job_id": "j", "instance": 0, "run_id": 1, "command": "true",
                "resources": Resources(cpu=1).to_record()}]})
        producer = Producer(kafka_access(settings))
        producer.produce(agent.commands.name, key=b"h1", value=command,
                         partition=partition_for("h1", agent.commands.partitions))
        producer.flush(10)
        deadline = time.monotonic() + 20
        while "j-0-1" not in agent.runs and time.monotonic() < deadline:
            agent.step()
        assert "j-0-1" in agent.runs, "the stalled agent never read the launch that waited"
        assert agent.reader.renewals == 1
    finally:
        agent.close()


def test_the_watch_learns_the_ends_while_the_broker_holds_the_readers_fetch(settings) -> None:
    """The watch's question goes on connections of its own: on the reader's, it waits behind the
    fetch the broker holds (as it would behind a stuck one), and a watch that asked there skipped
    its check for as long as the reader stayed stuck."""
    topic = Catalogue(settings.topic_prefix)["agent-commands"].name
    # A reader whose every fetch the broker holds 30 s: it waits for more bytes than will come.
    reader = Consumer({**kafka_access(settings), "group.id": f"held-{uuid.uuid4().hex[:6]}",
                       "enable.auto.commit": False, "fetch.wait.max.ms": 30000, "fetch.min.bytes": 100_000_000})
    producer = Producer(kafka_access(settings))
    try:
        reader.assign([TopicPartition(topic, 0, OFFSET_END)])
        settle_until = time.monotonic() + 2
        while time.monotonic() < settle_until:
            reader.poll(0.1)  # its first fetch goes out and is held
        for _ in range(3):
            producer.produce(topic, key=b"h", value=b"x", partition=0)
        producer.flush(10)
        asked = time.monotonic()
        ends = EndsAside(kafka_access(settings))(topic, [0], 5.0)
        assert ends == {0: 3}, ends
        assert time.monotonic() - asked < 5
        # The same question on the reader's connection: behind the held fetch, past the watch's
        # 0.5 s (twice, in case a fetch ended just as the first was asked).
        unanswered = 0
        for _ in range(2):
            try:
                reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=0.5, cached=False)
            except KafkaException:
                unanswered += 1
        assert unanswered >= 1, "the reader's own connection answered at once: the test proves nothing"
    finally:
        reader.close()


def test_a_launch_a_stalled_agent_has_not_read_waits_for_it_and_runs_once(settings) -> None:
    """The host manager's side of a stalled reader: the agent goes on reporting (its lease holds)
    without the run it has not read. Given up after the grace and run again, the run would start
    when the new reader reads its launch, beside its replacement; it waits instead, and runs once."""
    from dataclasses import replace

    from confluent_kafka.admin import OffsetSpec

    from peloton.host.driver import LaunchRequest
    from peloton.runtime.readback import offsets_at
    from stages.agent.agent import AgentSpec, HostAgent
    from stages.launch.agents.remote import RemoteDriver

    settings = replace(settings, agent_heartbeat_s=0.5)
    agent = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4, mem_mb=1024, disk_mb=1024), {})], simulate=True)
    catalogue = Catalogue(settings.topic_prefix)
    reports = Consumer({**kafka_access(settings), "group.id": f"t-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    producer = Producer(kafka_access(settings))
    admin = AdminClient(kafka_access(settings))
    try:
        agent.start()
        agent.reader = ReaderWatch(agent.commands.name, agent.reader.partitions, agent.reader.ends, **QUICK)
        commands = agent.command_partition["h1"]
        reports.assign([TopicPartition(catalogue["agent-reports"].name, agent.report_partition["h1"], OFFSET_END)])
        settle_until = time.monotonic() + 2
        while time.monotonic() < settle_until:
            agent.step()
        agent.consumer.pause(agent.consumer.assignment())

        def send(host_id: str, command: dict) -> None:
            producer.produce(agent.commands.name, key=host_id.encode(),
                             value=registry().encode("peloton.AgentCommand", command), partition=commands)

        def commands_end(_host_id: str) -> int | None:
            return offsets_at(admin, [(agent.commands.name, commands)], OffsetSpec.latest(), 2.0).get(
                (agent.commands.name, commands))

        driver = RemoteDriver(send, commands_end=commands_end)
        driver.launch([LaunchRequest("j-0-1", "j", 0, 1, "h1", "true", True, resources=Resources(cpu=1))])
        producer.flush(10)
        updates, judged = [], 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(u.state == "TASK_FINISHED" for u in updates):
            agent.step()
            for msg in reports.consume(100, 0.05):
                if msg.error():
                    continue
                name, value = registry().decode(msg.value())
                if name == "peloton.AgentReport" and value["host_id"] == "h1":
                    driver.receive(value, grace_s=1.0)
                    judged += "j-0-1" in driver.unread
                    updates.extend(driver.poll())
        states = [u.state for u in updates if u.task_id == "j-0-1"]
        assert "TASK_LOST" not in states, states
        assert agent.reader.renewals == 1
        assert judged, "no report came while the launch waited unread past its grace"
        assert states and states[-1] == "TASK_FINISHED", states
    finally:
        reports.close()
        agent.close()


def test_a_watch_whose_admin_client_answers_nothing_gets_a_new_one_and_learns_the_ends(settings) -> None:
    """The watch's admin client stuck (here: one that reaches no broker, as one stuck after the
    cluster's restart reaches none): its questions go unanswered, and the watch, kept quiet by it,
    never judged the reader. Past `unanswered_s` a new client asks, and answers come."""
    from pelotonctl.dev.processes import free_port

    topic = Catalogue(settings.topic_prefix)["agent-commands"].name
    producer = Producer(kafka_access(settings))
    for _ in range(2):
        producer.produce(topic, key=b"h", value=b"x", partition=0)
    producer.flush(10)
    made = []

    def make_admin():
        # the first reaches nothing; its successor reaches the broker
        bootstrap = f"127.0.0.1:{free_port()}" if not made else kafka_access(settings)["bootstrap.servers"]
        made.append(AdminClient({**kafka_access(settings), "bootstrap.servers": bootstrap, "log_level": 0}))
        return made[-1]

    aside = EndsAside(kafka_access(settings), unanswered_s=2.0, make_admin=make_admin)
    asked = time.monotonic()
    ends = None
    while ends is None and time.monotonic() - asked < 15:
        ends = aside(topic, [0, 1], 0.5)
    assert ends == {0: 2, 1: 0}, ends
    assert aside.renewals == 1 and len(made) == 2
    assert time.monotonic() - asked >= 2.0  # the first client had its time to answer
