"""The host manager's side of host agents (RemoteDriver), without a broker: commands out,
reports in, reconciliation and lost hosts."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from peloton.host.driver import LaunchRequest
from peloton.model.mesos import Reason
from peloton.model.resources import Resources
from stages.agent.agent import parse_resources
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


def test_agent_resources_parse_or_say_what_is_wrong() -> None:
    assert parse_resources("cpu=8,mem_mb=1024") == Resources(cpu=8, mem_mb=1024)
    for bad, why in (("cpu=x", "not a number"), ("ram=1", "unknown resource"), ("cpu=-1", ">= 0"),
                     ("cpu=inf", ">= 0"), ("cpu=nan", ">= 0")):
        with pytest.raises(ValueError, match=why):
            parse_resources(bad)


def test_agent_port_ranges_parse_or_say_what_is_wrong() -> None:
    from stages.agent.agent import parse_port_ranges

    assert parse_port_ranges("31000-32000, 40000-40000") == ((31000, 32000), (40000, 40000))
    for bad in ("", "x-1", "5-4", "0-10", "1-70000"):
        with pytest.raises(ValueError):
            parse_port_ranges(bad)


class Msg:
    def __init__(self, value: bytes, offset: int = 0, partition: int = 0) -> None:
        self._value, self._offset, self._partition = value, offset, partition

    def value(self) -> bytes:
        return self._value

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return self._partition

    def error(self):
        return None


def test_an_agent_runs_its_hosts_launches_and_skips_what_it_cannot_use(tmp_path) -> None:
    from peloton.config import Settings
    from peloton.serde import registry
    from stages.agent.agent import AgentSpec, HostAgent

    agent = HostAgent(Settings(bootstrap="127.0.0.1:1", home=tmp_path), [AgentSpec("h1", Resources(cpu=4), {})])
    try:
        def launch(task_id: str, host: str = "h1") -> bytes:
            return registry().encode("peloton.AgentCommand", {
                "command_id": "c", "host_id": host, "kills": [], "sent_ms": 1, "launches": [{
                    "task_id": task_id, "job_id": "j", "instance": 0, "run_id": 1, "command": "true",
                    "resources": Resources(cpu=1).to_record()}]})

        for value in (b"garbage", launch("../../etc"), launch("j-0-1", host="h2"), launch("j-0-1")):
            agent._commands([Msg(value)])
        assert set(agent.runs) == {"j-0-1"}  # only its own host's, and only a sound task id
        deadline = 50
        while "j-0-1" in agent.driver.active() and deadline:
            agent.pending.extend(agent.driver.poll())
            deadline -= 1
            time.sleep(0.1)
        states = [u.state for u in agent.pending + agent.driver.poll() if u.task_id == "j-0-1"]
        assert states[-1] == "TASK_FINISHED"
    finally:
        agent.driver.close()
        agent.consumer.close()


def test_an_agent_opens_the_commands_sealed_for_its_host_and_no_others(tmp_path) -> None:
    """Every agent reads its shard's partition; a command sealed with another host's key, or a
    forged one, starts nothing (peloton/auth/host_keys.py)."""
    from peloton.auth.host_keys import host_key, seal
    from peloton.config import Settings
    from peloton.serde import registry
    from stages.agent.agent import AgentSpec, HostAgent

    cluster_key = "ab" * 32
    settings = Settings(bootstrap="127.0.0.1:1", home=tmp_path, host_key=host_key(cluster_key, "h1"))
    agent = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})])
    try:
        def sealed(task_id: str, host: str, key_of: str) -> bytes:
            plain = registry().encode("peloton.AgentCommand", {
                "command_id": "c", "host_id": host, "kills": [], "sent_ms": 1, "launches": [{
                    "task_id": task_id, "job_id": "j", "instance": 0, "run_id": 1, "command": "true",
                    "resources": Resources(cpu=1).to_record()}]})
            return registry().encode("peloton.SealedAgentCommand", {
                "host_id": host, "sealed": seal(host_key(cluster_key, key_of), host, plain)})

        for value in (sealed("j-1-1", "h1", "h2"), sealed("j-2-1", "h2", "h2"), sealed("j-0-1", "h1", "h1")):
            agent._commands([Msg(value)])
        assert set(agent.runs) == {"j-0-1"}
    finally:
        agent.driver.close()
        agent.consumer.close()


def test_a_run_that_ended_before_its_agent_restarted_is_reported_as_it_ended_not_lost(tmp_path) -> None:
    """Its report not yet delivered (here: no broker at all), the agent stops; the next agent on
    the same state directory reports the run's real ending. Before, it reported the run lost, and
    the host manager ran a task that had succeeded a second time."""
    from peloton.config import Settings
    from peloton.serde import registry
    from stages.agent.agent import AgentSpec, HostAgent

    settings = Settings(bootstrap="127.0.0.1:1", home=tmp_path)
    first = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})])
    try:
        for task_id, command in (("j-0-1", "true"), ("j-1-1", "exit 3")):
            first._commands([Msg(registry().encode("peloton.AgentCommand", {
                "command_id": task_id, "host_id": "h1", "kills": [], "sent_ms": 1, "launches": [{
                    "task_id": task_id, "job_id": "j", "instance": 0, "run_id": 1, "command": command,
                    "resources": Resources(cpu=1).to_record()}]}))])
        deadline = time.monotonic() + 10
        while first.driver.active() and time.monotonic() < deadline:
            first.step()
        assert not first.driver.active(), "the runs never ended"
        assert set(first.runs) == {"j-0-1", "j-1-1"}  # no report delivered: both kept
    finally:
        first.driver.close()
        first.consumer.close()
    second = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})])
    try:
        second._adopt()
        endings = {u.task_id: (u.state, u.exit_code) for u in second.pending}
        assert endings == {"j-0-1": ("TASK_FINISHED", 0), "j-1-1": ("TASK_FAILED", 3)}
        assert not second.adopted
        # Once a report of them is delivered, they are forgotten, as any ending.
        second._report()
        for round_id in list(second._rounds):
            for _ in range(second._rounds[round_id].waiting):
                second._delivered(round_id, None)
        second._save_forgotten()  # the end of the step that read the acknowledgement
        assert second.runs == {} and set(second.ended) == {"j-0-1", "j-1-1"}
        assert second.endings == {} and second.journal.path.read_text() == ""
        assert json.loads((second.state_dir / "runs.json").read_text()) == {}
    finally:
        second.driver.close()
        second.consumer.close()


def _agent_that_dies(settings, runs: dict[str, str], kills: tuple[str, ...] = (), dies: bool = True,
                     checks: dict[str, str] | None = None):
    """An agent that starts these runs (task id -> shell command), is told to kill `kills`, and is
    gone without a close(): its runs go on, as after a SIGKILL, and none of their endings is seen
    by it. `checks`: task id -> its health check (JSON)."""
    from peloton.serde import registry
    from stages.agent.agent import AgentSpec, HostAgent

    first = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})])
    for task_id, command in runs.items():
        first._commands([Msg(registry().encode("peloton.AgentCommand", {
            "command_id": task_id, "host_id": "h1", "kills": [], "sent_ms": 1, "launches": [{
                "task_id": task_id, "job_id": "j", "instance": int(task_id.split("-")[1]), "run_id": 1,
                "command": command, "resources": Resources(cpu=1).to_record(),
                "health_check_json": (checks or {}).get(task_id)}]}))])
    assert set(first.runs) == set(runs)
    _until_started(first, kills)  # each run to be killed has started (not only its executor)
    if kills:
        first._commands([Msg(registry().encode("peloton.AgentCommand", {
            "command_id": "kills", "host_id": "h1", "kills": list(kills), "sent_ms": 1, "launches": []}))])
    if dies:
        first.consumer.close()
    return first


def _until_started(agent, task_ids) -> None:
    """Until the runs' commands (each starting with `touch up`) have started."""
    deadline = time.monotonic() + 10
    while not all((agent.driver.sandbox(t) / "up").exists() for t in task_ids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _endings_of_adopted(agent) -> dict[str, tuple[str, int | None]]:
    """Watches the agent's adopted runs to their ends: task id -> (state, exit code) reported."""
    deadline = time.monotonic() + 10
    while agent.adopted and time.monotonic() < deadline:
        agent._watch_adopted()
        time.sleep(0.05)
    return {u.task_id: (u.state, u.exit_code) for u in agent.pending}


def test_runs_that_ended_while_no_agent_watched_are_reported_as_their_executors_saw_them_end(tmp_path) -> None:
    """The agent gone, its runs end; the next agent reads each ending from the run's executor
    (peloton/host/executor.py). Before, each was reported lost: the exit code had gone
    with the agent that was the run's parent, and a task that had succeeded ran again."""
    from peloton.config import Settings
    from stages.agent.agent import AgentSpec, HostAgent

    settings = Settings(bootstrap="127.0.0.1:1", home=tmp_path)
    first = _agent_that_dies(settings, {"j-0-1": "true", "j-1-1": "exit 3", "j-2-1": "kill -TERM $$",
                                        "j-3-1": "sleep 30", "j-4-1": "touch up; sleep 30"}, kills=("j-4-1",))
    groups = {t: first.driver._tasks[t].pid for t in first.runs}
    os.killpg(groups["j-3-1"], signal.SIGKILL)  # its executor too: nothing could say how it ended
    for task_id in groups:
        first.driver._tasks[task_id].proc.wait(10)
    second = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})])
    try:
        second._adopt()
        endings = {u.task_id: (u.state, u.exit_code, u.signal) for u in second.pending}
        assert endings == {"j-0-1": ("TASK_FINISHED", 0, None), "j-1-1": ("TASK_FAILED", 3, None),
                           "j-2-1": ("TASK_FAILED", None, signal.SIGTERM), "j-3-1": ("TASK_LOST", None, None),
                           "j-4-1": ("TASK_KILLED", None, signal.SIGTERM)}  # the kill its first agent sent
        second._keep_endings()  # kept until a report of them is acknowledged, as any ending
        assert set(second.endings) == {"j-0-1", "j-1-1", "j-2-1", "j-4-1"}
    finally:
        second.driver.close()
        second.consumer.close()


def test_an_adopted_run_that_ends_is_reported_as_it_ended(tmp_path) -> None:
    from peloton.config import Settings
    from stages.agent.agent import AgentSpec, HostAgent

    settings = Settings(bootstrap="127.0.0.1:1", home=tmp_path)
    first = _agent_that_dies(settings, {"j-0-1": "sleep 1; exit 4", "j-1-1": "sleep 1"})
    second = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})])
    try:
        second._adopt()
        assert set(second.adopted) == {"j-0-1", "j-1-1"} and second.pending == []
        assert _endings_of_adopted(second) == {"j-0-1": ("TASK_FAILED", 4), "j-1-1": ("TASK_FINISHED", 0)}
    finally:
        for task in first.driver._tasks.values():
            task.proc.wait(10)
        second.driver.close()
        second.consumer.close()


def test_an_adopted_runs_health_is_checked_by_the_agent_that_adopted_it(tmp_path) -> None:
    """Its check goes on after the restart: news of a healthy run, and a run whose check gives up
    killed and reported failed as unhealthy (before, an adopted run went unchecked)."""
    from peloton.config import Settings
    from peloton.host.orphans import surviving_groups
    from peloton.model.health import COMMAND, HealthCheck
    from stages.agent.agent import AgentSpec, HostAgent

    def check(command: str) -> str:
        return HealthCheck(COMMAND, command=command, initial_interval_s=0.5, interval_s=0.1,
                           max_consecutive_failures=2, timeout_s=2).to_json()

    settings = Settings(bootstrap="127.0.0.1:1", home=tmp_path)
    _agent_that_dies(settings, {"j-0-1": "sleep 30", "j-1-1": "sleep 30"},
                     checks={"j-0-1": check("true"), "j-1-1": check("false")})
    second = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})])
    second.producer = SilentProducer()  # takes the reports: their updates are read from it below
    try:
        second.lease_until = time.monotonic() + 60
        second._adopt()
        assert set(second.adopted) == {"j-0-1", "j-1-1"}
        deadline = time.monotonic() + 10
        while "j-1-1" in second.adopted and time.monotonic() < deadline:
            second.step()
        said = [(u.task_id, u.state, u.health, u.reason) for r in second._rounds.values() for u in r.updates]
        assert ("j-0-1", "TASK_RUNNING", "HEALTHY", "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED") in said
        assert ("j-1-1", "TASK_FAILED", "", "REASON_TASK_UNHEALTHY") in said
        assert surviving_groups(second.sandbox_root, ["j-1-1"]) == {}  # killed, its group gone
    finally:
        second.close()


def test_an_agent_restarted_with_sighup_hands_its_runs_over_and_the_next_adopts_them(tmp_path) -> None:
    """SIGHUP: the runs go on under their executors, told the lease's end, and the next agent
    adopts them (they are not fenced after it took them over) and reports them as they end."""
    from peloton.config import Settings
    from stages.agent.agent import AgentSpec, HostAgent

    settings = Settings(bootstrap="127.0.0.1:1", home=tmp_path)
    first = _agent_that_dies(settings, {"j-0-1": "touch up; sleep 5; exit 4", "j-1-1": "touch up; sleep 5"}, dies=False)
    _until_started(first, first.runs)
    # Made now, as making one takes a while: the second adopts the runs and is restarted in turn,
    # handing them over again, to the third.
    second, third = (HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})]) for _ in range(2))
    first.producer = SilentProducer()
    first.lease_until = time.monotonic() + 3.0  # their executors would fence them 3 s from now (the runs last 5)
    first.restart()
    first.close()
    try:
        assert first.handed == {"j-0-1", "j-1-1"} and set(first.runs) == {"j-0-1", "j-1-1"}
        assert json.loads((first.state_dir / "runs.json").read_text()).keys() == {"j-0-1", "j-1-1"}
        assert first.pending == [] and first.producer.held  # its last report went, and lost nothing
        second.lease_until = time.monotonic() + 60  # as a report of its own would have renewed it
        second._adopt()
        assert set(second.adopted) == {"j-0-1", "j-1-1"} and second.pending == []
        assert not any((second.driver.sandbox(t) / ".peloton-lease").exists() for t in second.adopted)
        second.producer = SilentProducer()
        second.restart()
        second.close()  # adopted runs are handed over too (their cgroups kept)
        assert second.handed == {"j-0-1", "j-1-1"}
        third.lease_until = time.monotonic() + 60
        third._adopt()
        assert set(third.adopted) == {"j-0-1", "j-1-1"} and third.pending == []
        assert _endings_of_adopted(third) == {"j-0-1": ("TASK_FAILED", 4), "j-1-1": ("TASK_FINISHED", 0)}
    finally:
        third.driver.close()
        third.consumer.close()


def test_runs_handed_over_to_no_agent_are_killed_when_the_lease_runs_out_and_reported_lost(tmp_path) -> None:
    from peloton.config import Settings
    from stages.agent.agent import AgentSpec, HostAgent

    settings = Settings(bootstrap="127.0.0.1:1", home=tmp_path)
    first = _agent_that_dies(settings, {"j-0-1": "touch up; sleep 30"}, dies=False)
    _until_started(first, ["j-0-1"])
    pgid = first.driver._tasks["j-0-1"].pid
    first.producer = SilentProducer()
    first.lease_until = time.monotonic() + 0.5
    first.restart()
    first.close()
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _group_alive(pgid), "a run handed over outlived the lease with no agent to hold it"
    second = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})])
    try:
        second._adopt()
        assert [(u.task_id, u.state, u.reason) for u in second.pending] == [
            ("j-0-1", "TASK_LOST", "REASON_AGENT_FENCED")]
    finally:
        second.driver.close()
        second.consumer.close()


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group runs (a zombie does not: this test process, not init, is
    the parent of an executor the test's first agent started)."""
    from peloton.host.orphans import live_groups

    return pgid in live_groups()


def test_an_agent_stopped_before_its_endings_were_acknowledged_leaves_them_to_the_next(tmp_path) -> None:
    """A clean stop reports the runs it ends lost and forgets them; an ending it could not get
    acknowledged (the broker away) is kept for the next agent (it was forgotten with them)."""
    from peloton.config import Settings
    from peloton.host.driver import TaskUpdate
    from stages.agent.agent import AgentSpec, HostAgent

    settings = Settings(bootstrap="127.0.0.1:1", home=tmp_path)
    first = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})], simulate=True)
    first.producer = SilentProducer()  # takes the reports, acknowledges none
    first.runs = {"j-0-1": {"job_id": "j", "instance": 0, "run_id": 1, "host": "h1"}}
    first.pending.append(TaskUpdate("j-0-1", "h1", "TASK_FINISHED", 1, exit_code=0))
    first._keep_endings()
    first._report()
    first.close()
    second = HostAgent(settings, [AgentSpec("h1", Resources(cpu=4), {})], simulate=True)
    try:
        second._adopt()
        assert [(u.task_id, u.state, u.exit_code) for u in second.pending] == [("j-0-1", "TASK_FINISHED", 0)]
    finally:
        second.driver.close()
        second.consumer.close()


def test_the_endings_journal_keeps_what_it_can_read_of_runs_still_kept(tmp_path) -> None:
    import json

    from peloton.host.driver import TaskUpdate
    from stages.agent.endings import EndingsJournal

    journal = EndingsJournal(tmp_path / "endings.jsonl")
    assert journal.load({"j-0-1": {}}) == {}  # no file yet
    finished = TaskUpdate("j-0-1", "h1", "TASK_FINISHED", 1, exit_code=0, cpu_seconds=0.5)
    failed = TaskUpdate("j-1-1", "h1", "TASK_FAILED", 2, exit_code=3)
    journal.append([finished])
    journal.append([failed])
    assert journal.load({"j-0-1": {}, "j-1-1": {}}) == {"j-0-1": finished, "j-1-1": failed}
    assert journal.load({"j-1-1": {}}) == {"j-1-1": failed}  # j-0-1's was acknowledged: its run is gone
    with open(journal.path, "a") as f:
        f.write(json.dumps({"task_id": "j-2-1", "host_id": "h1", "state": "TASK_RUNNING", "timestamp_ms": 3}) + "\n")
        f.write(json.dumps({"task_id": "j-3-1", "host_id": "h1", "state": "TASK_FINISHED", "timestamp_ms": 3,
                            "colour": "red"}) + "\n")
        f.write("[1, 2]\n")
        f.write('{"task_id": "j-4-1", "host_id": "h1", "sta')  # cut short by a crash mid-append
    runs = {t: {} for t in ("j-0-1", "j-1-1", "j-2-1", "j-3-1", "j-4-1")}
    assert journal.load(runs) == {"j-0-1": finished, "j-1-1": failed}  # the rest is no ending: lost, as before
    journal.rewrite([failed])
    assert journal.load(runs) == {"j-1-1": failed}
    journal.append([finished])  # after a rewrite, on the new file
    assert journal.load(runs) == {"j-0-1": finished, "j-1-1": failed}
    journal.rewrite([])
    assert journal.load(runs) == {} and journal.path.read_text() == ""
    journal.append([failed])  # after emptying in place, from its start
    assert journal.path.read_text().count("\n") == 1 and journal.load(runs) == {"j-1-1": failed}
    journal.close()


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


class SilentProducer:
    """Takes reports and never answers them: the Kafka client seen stuck after a whole-cluster
    restart (neither delivered nor timed out). `answering` ones acknowledge at each poll, and
    `failing` ones fail each report at each poll (another client seen after such a restart: every
    report timed out, round after round)."""

    def __init__(self, answering: bool = False, failing: bool = False) -> None:
        self.answering = answering or failing
        self.error = "Local: Message timed out" if failing else None
        self.held: list = []
        self.purged = False

    def produce(self, topic, key=None, value=None, partition=None, on_delivery=None) -> None:
        self.held.append(on_delivery)

    def poll(self, timeout: float = 0) -> int:
        if not self.answering:
            return 0
        answered, self.held = self.held, []
        for callback in answered:
            callback(self.error, None)
        return len(answered)

    def purge(self, *args, **kwargs) -> None:
        self.purged = True

    def flush(self, timeout: float = 0) -> int:
        return len(self.held)

    def __len__(self) -> int:
        return len(self.held)


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
    import json

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
