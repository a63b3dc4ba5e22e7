"""The host agent's reports and lease without a broker: producers replaced when reports fail,
how far it has read its commands, and launches held while its lease runs out."""

from __future__ import annotations

import json
import time

import pytest

from peloton.model.resources import Resources
from tests.builders.agents import Msg, SilentProducer


@pytest.fixture
def agent(tmp_path):
    """A simulated agent of one host, h1, whose broker is not there; closed after the test."""
    from peloton.config import Settings
    from stages.agent.agent import AgentSpec, HostAgent

    made = HostAgent(Settings(bootstrap="127.0.0.1:1", home=tmp_path), [AgentSpec("h1", Resources(cpu=4), {})],
                     simulate=True)
    try:
        yield made
    finally:
        made.driver.close()
        made.consumer.close()


def test_an_agent_replaces_a_producer_whose_every_report_fails_and_sends_its_updates_again(agent) -> None:
    from peloton.host.driver import TaskUpdate
    from stages.agent.agent import REPORT_ANSWER_GRACE_S

    failing, made = SilentProducer(failing=True), []
    agent.producer = failing
    agent._new_producer = lambda: made.append(SilentProducer(answering=True)) or made[-1]
    agent.pending.append(TaskUpdate("j-0-1", "h1", "TASK_FINISHED", 1, exit_code=0))
    for _ in range(3):  # each round fails and its update goes again with the next
        agent._report()
        agent.producer.poll(0)
    assert not agent._rounds and [u.task_id for u in agent.pending] == ["j-0-1"] and agent.failed_rounds == 3
    # No round stays unanswered, so only the time since a report last got through tells.
    agent.delivered_at -= agent.report_timeout_s + REPORT_ANSWER_GRACE_S - 2
    agent._check_unanswered()
    assert agent.producer is failing and not made
    agent.delivered_at -= 3
    agent._check_unanswered()
    assert agent.producer is made[0] and agent.producer_renewals == 1 and agent.failed_rounds == 0
    lease_before = agent.lease_until
    agent._report()
    agent.producer.poll(0)
    assert not agent._rounds and not agent.pending and agent.lease_until > lease_before
    agent._check_unanswered()  # a producer that delivers is kept
    assert agent.producer is made[0] and agent.producer_renewals == 1


def test_an_agent_replaces_a_producer_that_never_answers_and_sends_its_updates_again(agent) -> None:
    from peloton.host.driver import TaskUpdate
    from stages.agent.agent import REPORT_ANSWER_GRACE_S

    stuck, made = SilentProducer(), []
    agent.producer = stuck
    agent._new_producer = lambda: made.append(SilentProducer(answering=True)) or made[-1]
    agent.pending.append(TaskUpdate("j-0-1", "h1", "TASK_FINISHED", 1, exit_code=0))
    agent._report()
    agent._report()  # a heartbeat round with no news
    assert len(agent._rounds) == 2 and not agent.pending

    # Within the message timeout and its grace, an unanswered round is only waiting.
    for sending in agent._rounds.values():
        sending.sent -= agent.report_timeout_s + REPORT_ANSWER_GRACE_S - 2
    agent._check_unanswered()
    assert agent.producer is stuck and not made

    for sending in agent._rounds.values():
        sending.sent -= 3
    lease_before = agent.lease_until
    agent._check_unanswered()
    assert agent.producer is made[0] and agent.producer_renewals == 1
    assert not agent._rounds and [u.task_id for u in agent.pending] == ["j-0-1"]
    deadline = time.monotonic() + 5
    while not stuck.purged and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stuck.purged  # its queue let go, away from the loop

    # An answer the old client gives after all finds no round, and changes nothing.
    for callback in stuck.held:
        callback(None, None)
    assert [u.task_id for u in agent.pending] == ["j-0-1"] and agent.lease_until == lease_before

    # The new producer's acknowledgement renews the lease, and the update is delivered.
    agent._report()
    agent.producer.poll(0)
    assert not agent._rounds and not agent.pending and agent.lease_until > lease_before


def test_an_agent_not_heard_within_its_lease_after_starting_has_nothing_to_kill_and_waits_to_be_heard(
        agent, caplog) -> None:
    """A broker slow to answer an agent's first reports (one just up, on a loaded machine): the
    lease runs out with no run to kill, so none is said to be killed; launches still wait until a
    report sent after that gets through."""
    from peloton.serde import registry

    slow = SilentProducer()
    agent.producer = slow
    agent._report()
    agent.lease_until = time.monotonic() - 0.1
    with caplog.at_level("INFO", logger="peloton.agent"):
        agent.step()
        assert agent.fenced_at is not None
        said = caplog.text
        assert "since the agent started: no run here to kill" in said and "killing" not in said
        launch = registry().encode("peloton.AgentCommand", {
            "command_id": "c", "host_id": "h1", "kills": [], "sent_ms": 2 ** 60, "launches": [{
                "task_id": "j-0-1", "job_id": "j", "instance": 0, "run_id": 1, "command": "true",
                "resources": Resources(cpu=1).to_record()}]})
        agent._commands([Msg(launch)])  # read just after the fence: it waits for a report
        assert not agent.runs and not agent.pending and list(agent.held) == ["j-0-1"]

        first, later = slow.held[:1], slow.held[1:]  # the round sent before the fence, those after
        assert later
        first[0](None, None)  # the broker answers at last, the oldest first
        agent._start_held(time.monotonic())
        assert agent.fenced_at is not None and "first was acknowledged" in caplog.text and not agent.runs
        for callback in later:
            callback(None, None)
        assert agent.fenced_at is None and agent.lease_until > time.monotonic()
        agent._start_held(time.monotonic())
        assert list(agent.runs) == ["j-0-1"] and not agent.held and "the 1 launches held" in caplog.text


def test_an_agents_report_says_how_far_it_has_read_its_commands(agent) -> None:
    from peloton.serde import registry

    sent: list[bytes] = []
    producer = SilentProducer(answering=True)
    producer.produce = lambda topic, key=None, value=None, partition=None, on_delivery=None: sent.append(value)
    agent.producer = producer
    partition = agent.command_partition["h1"]
    agent._report()  # nothing handled yet, and the reader has not fetched: it does not say
    agent.offsets[partition] = 17  # every command before 17 handled
    agent._report()
    said = [registry().decode(v)[1]["commands_read"] for v in sent]
    assert said == [None, 17]


def launch_command(task_id: str, kills: tuple[str, ...] = ()) -> bytes:
    from peloton.serde import registry

    return registry().encode("peloton.AgentCommand", {
        "command_id": "c", "host_id": "h1", "kills": list(kills), "sent_ms": 2 ** 60, "launches": [{
            "task_id": task_id, "job_id": "j", "instance": 0, "run_id": 1, "command": "true",
            "resources": Resources(cpu=1).to_record()}] if not kills else []})


@pytest.fixture
def short_lease_agent(agent):
    """A simulated agent whose reports go unanswered until the test answers them, with less of
    its lease left than the margin (2 s): as after a broker outage almost as long as the lease."""
    sent: list[bytes] = []
    producer = SilentProducer()
    plain_produce = producer.produce
    producer.produce = lambda topic, key=None, value=None, partition=None, on_delivery=None: (
        sent.append(value), plain_produce(topic, on_delivery=on_delivery))
    agent.producer = producer
    agent.lease_until = time.monotonic() + 0.5
    return agent, producer, sent


def test_a_launch_read_as_the_lease_runs_out_waits_for_a_report_and_starts_once(short_lease_agent) -> None:
    """Started at once, it would be killed by the fence a moment later and run again: it waits,
    the host manager is told it is not read yet, and a restart would read it again."""

    from peloton.serde import registry

    agent, producer, sent = short_lease_agent
    partition = agent.command_partition["h1"]
    agent._commands([Msg(launch_command("j-0-1"), offset=41, partition=partition)])
    agent.offsets[partition] = 42
    agent._save_offsets()
    assert not agent.runs and not agent.driver.active() and list(agent.held) == ["j-0-1"]
    assert json.loads((agent.state_dir / "offsets.json").read_text()) == {str(partition): 41}
    agent._report()
    assert registry().decode(sent[-1])[1]["commands_read"] == 41
    agent._start_held(time.monotonic())
    assert not agent.runs  # nothing renewed the lease yet
    for callback in producer.held:  # the broker acknowledges the report: the lease is renewed
        callback(None, None)
    agent.step()
    assert list(agent.runs) == ["j-0-1"] and "j-0-1" in agent.driver.active() and not agent.held
    assert json.loads((agent.state_dir / "offsets.json").read_text()) == {str(partition): 42}
    agent._commands([Msg(launch_command("j-0-1"), offset=41, partition=partition)])  # read again: nothing
    assert list(agent.runs) == ["j-0-1"]


def test_a_held_launch_no_report_renews_in_time_is_answered_lost_and_never_started(short_lease_agent) -> None:
    """Past its deadline the host manager may have given the host up and run the task elsewhere:
    an acknowledgement that comes later starts nothing."""
    agent, producer, _ = short_lease_agent
    agent._commands([Msg(launch_command("j-0-1"))])
    agent._report()
    agent.held["j-0-1"].until = time.monotonic() - 0.01  # the time a report had passed
    for callback in producer.held:  # acknowledged too late to count for the held launch
        callback(None, None)
    assert agent.lease_until - time.monotonic() > agent.start_margin
    agent._start_held(time.monotonic())
    assert not agent.runs and not agent.held and not agent.driver.active()
    [lost] = agent.pending
    assert (lost.task_id, lost.state, lost.reason) == ("j-0-1", "TASK_LOST", "REASON_AGENT_FENCED")
    agent._commands([Msg(launch_command("j-0-1"))])  # read again (a host manager that took over): still not
    assert not agent.runs and not agent.held


def test_a_kill_of_a_held_launch_ends_it_before_it_starts(short_lease_agent) -> None:
    agent, producer, _ = short_lease_agent
    agent._commands([Msg(launch_command("j-0-1"))])
    agent._commands([Msg(launch_command("", kills=("j-0-1",)))])
    assert not agent.held and [(u.task_id, u.state) for u in agent.pending] == [("j-0-1", "TASK_KILLED")]
    agent._report()
    for callback in producer.held:
        callback(None, None)
    agent._start_held(time.monotonic())
    assert not agent.runs and not agent.driver.active()


def test_an_agent_whose_reports_the_client_refuses_goes_on_and_says_why(agent, caplog) -> None:
    """An ACL taken away: librdkafka refuses the report in produce() itself (it knows the topic is
    denied), which ended the agent, and every run with it."""
    from confluent_kafka import KafkaError, KafkaException

    from peloton.host.driver import TaskUpdate

    refusing = SilentProducer()

    def refuse(*args, **kwargs):
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed"))

    refusing.produce = refuse
    agent.producer = refusing
    agent.pending.append(TaskUpdate("j-0-1", "h1", "TASK_FINISHED", 1, exit_code=0))
    with caplog.at_level("WARNING", logger="peloton.agent"):
        agent._report()
        agent._report()
    assert [u.task_id for u in agent.pending] == ["j-0-1"] and not agent._rounds and agent.failed_rounds == 2
    assert caplog.text.count("Topic authorization failed") == 1  # said once, not at every step

    def refuse_plainly(*args, **kwargs):  # a refusal that carries no KafkaError is said too
        raise KafkaException("said otherwise")

    refusing.produce = refuse_plainly
    agent._refused_said_at = float("-inf")
    with caplog.at_level("WARNING", logger="peloton.agent"):
        agent._report()
    assert "said otherwise" in caplog.text


def test_a_launch_read_with_its_kill_in_one_batch_is_never_started(short_lease_agent) -> None:
    """An agent behind on its commands reads a launch and, further on, the kill of that run (the
    job manager gave it up meanwhile, and may run it elsewhere): it never starts it."""
    agent, _, _ = short_lease_agent
    agent.lease_until = time.monotonic() + 60  # a healthy lease: it would start at once
    agent._commands([Msg(launch_command("j-0-1"), offset=1), Msg(launch_command("j-1-1"), offset=2),
                     Msg(launch_command("", kills=("j-0-1",)), offset=3)])
    assert list(agent.runs) == ["j-1-1"] and agent.driver.active() == {"j-1-1"}
    assert [(u.task_id, u.state) for u in agent.pending] == [("j-0-1", "TASK_KILLED")]
    agent._commands([Msg(launch_command("j-0-1"), offset=1)])  # read again: still not started
    assert list(agent.runs) == ["j-1-1"]
