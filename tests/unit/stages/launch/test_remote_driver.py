"""The host manager's side of host agents (RemoteDriver), without a broker: commands out,
reports in, reconciliation and lost hosts."""

from __future__ import annotations

import pytest

from peloton.host.driver import LaunchRequest
from peloton.model.mesos import Reason
from peloton.model.resources import Resources
from stages.launch.agents.remote import RemoteDriver


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(task_id: str, host_id: str) -> LaunchRequest:
    return LaunchRequest(task_id, "j", int(task_id.split("-")[1]), 1, host_id, "sleep 1", True,
                         resources=Resources(cpu=1))


def report(host_id: str, running: list[str], updates: list[tuple[str, str]] = (), read: int | None = None) -> dict:
    return {"host_id": host_id, "agent_id": "a", "capacity": Resources(cpu=4).to_record(), "labels": {},
            "running": running, "sent_ms": 1, "commands_read": read,
            "updates": [{"task_id": t, "state": s, "reason": "", "message": "", "exit_code": 0 if s == "TASK_FINISHED"
                         else None, "signal": None, "timestamp_ms": 1} for t, s in updates]}


@pytest.fixture
def driver():
    sent: list[tuple[str, dict]] = []
    clock = Clock()
    return RemoteDriver(lambda host, command: sent.append((host, command)), clock), sent, clock


def test_launches_and_kills_go_to_each_host_as_one_command(driver) -> None:
    d, sent, _ = driver
    d.launch([request("j-0-1", "h1"), request("j-1-1", "h1"), request("j-2-1", "h2")])
    d.launch([request("j-0-1", "h1")])  # a repeat launches nothing
    assert [(h, [launch["task_id"] for launch in c["launches"]]) for h, c in sent] == [
        ("h1", ["j-0-1", "j-1-1"]), ("h2", ["j-2-1"])]
    sent.clear()
    d.kill(["j-1-1", "j-2-1", "unknown"])
    assert sorted((h, c["kills"]) for h, c in sent) == [("h1", ["j-1-1"]), ("h2", ["j-2-1"])]


def test_a_report_brings_updates_and_reconciles_what_the_agent_runs(driver) -> None:
    d, sent, clock = driver
    d.launch([request("j-0-1", "h1"), request("j-1-1", "h1"), request("j-2-1", "h1")])
    # j-2-1 was sent a moment ago: the agent may not have read it yet, so it is not lost
    unknown = d.receive(report("h1", ["j-0-1", "stray-0-1"], [("j-1-1", "TASK_FINISHED")]), grace_s=5)
    assert unknown == ["stray-0-1"]  # the host manager has it killed
    assert [(u.task_id, u.state) for u in d.poll()] == [("j-1-1", "TASK_FINISHED")]
    assert d.active() == {"j-0-1", "j-2-1"}
    clock.now += 10  # j-2-1 is still not on the agent after the grace: lost
    d.receive(report("h1", ["j-0-1"]), grace_s=5)
    [lost] = d.poll()
    assert (lost.task_id, lost.state, lost.reason) == ("j-2-1", "TASK_LOST", Reason.RECONCILIATION)
    assert d.active() == {"j-0-1"}


def test_a_run_that_ended_is_not_lost_by_the_next_report_read_in_the_same_batch(driver) -> None:
    """A host manager behind its input reads several reports of a host before it polls: the one
    after the run's end no longer lists the run, and the run ended, it was not lost."""
    d, _, clock = driver
    d.launch([request("j-0-1", "h1"), request("j-1-1", "h1")])
    clock.now += 10
    d.receive(report("h1", ["j-1-1"], [("j-0-1", "TASK_FINISHED")]), grace_s=5)
    d.receive(report("h1", ["j-1-1"]), grace_s=5)
    assert [(u.task_id, u.state) for u in d.poll()] == [("j-0-1", "TASK_FINISHED")]
    assert d.active() == {"j-1-1"}


def test_a_launch_its_agent_has_not_read_is_late_not_lost_and_one_it_read_past_is_lost() -> None:
    """An agent whose command reader stalled still reports (its lease holds), without the runs it
    has not read yet: those wait for it. Given up and run again, they would start when it reads
    them, beside their replacements."""
    clock, asked = Clock(), []
    ends = {"h1": 40}

    def commands_end(host_id: str) -> int | None:
        asked.append(host_id)
        return ends.get(host_id)

    d = RemoteDriver(lambda host, command: None, clock, commands_end)
    d.launch([request("j-0-1", "h1"), request("j-1-1", "h1"), request("j-2-1", "h2")])
    clock.now += 10
    d.receive(report("h1", ["j-0-1"], read=25), grace_s=5)  # the agent stands before the end: not read
    assert d.poll() == [] and d.active() == {"j-0-1", "j-1-1", "j-2-1"} and asked == ["h1"]
    ends["h1"] = 90  # later commands: j-1-1's launch still lies before 40, where it was asked
    d.receive(report("h1", ["j-0-1"], read=39), grace_s=5)
    assert d.poll() == [] and asked == ["h1"]
    d.receive(report("h1", ["j-0-1"], read=40), grace_s=5)  # read past it, and it does not run it
    [lost] = d.poll()
    assert (lost.task_id, lost.state, lost.reason) == ("j-1-1", "TASK_LOST", Reason.RECONCILIATION)
    # The broker does not say where h2's commands end: nothing is judged, and it is asked again.
    d.receive(report("h2", [], read=3), grace_s=5)
    d.receive(report("h2", [], read=3), grace_s=5)
    assert d.poll() == [] and "j-2-1" in d.active() and asked == ["h1", "h2", "h2"]
    # An agent that does not say where it stands (an older one): lost after the grace, as before.
    d.receive(report("h2", []), grace_s=5)
    assert [(u.task_id, u.state) for u in d.poll()] == [("j-2-1", "TASK_LOST")]
    assert d.active() == {"j-0-1"} and not d.unread


def test_an_adopted_run_is_known_and_a_silent_host_loses_its_runs_once(driver) -> None:
    d, _, _ = driver
    d.adopt("j-0-1", "h1")
    assert d.receive(report("h1", ["j-0-1"]), grace_s=5) == []
    d.host_lost("h1", "its agent sent no report for 10s")
    d.host_lost("h1", "again")
    [lost] = d.poll()
    assert (lost.task_id, lost.state, lost.reason) == ("j-0-1", "TASK_LOST", Reason.AGENT_DISCONNECTED)
    assert d.active() == set()
