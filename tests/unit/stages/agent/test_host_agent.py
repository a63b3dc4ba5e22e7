"""The host agent (HostAgent) without a broker: the resources and ports it offers, the launches it
runs and skips, the commands sealed for its host, and runs adopted across restarts with their
endings journal."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from peloton.model.resources import Resources
from stages.agent.agent import parse_resources
from tests.builders.agents import Msg, SilentProducer


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
