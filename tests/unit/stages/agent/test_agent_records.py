"""The agent's records, built by plain functions (stages/agent/reports.py, commands.py)."""

from __future__ import annotations

from peloton.host.driver import TaskUpdate
from peloton.model.resources import Resources
from peloton.serde import registry
from stages.agent.commands import addressed, checked_request, launch_request, run_entry
from stages.agent.reports import report_record, running_by_host, updates_by_host
from stages.agent.spec import AgentSpec

LAUNCH = {"task_id": "j-0-1", "job_id": "j", "instance": 0, "run_id": 1, "command": "sleep 1", "shell": True,
          "arguments": [], "environment": {"A": "1"}, "resources": Resources(cpu=1).to_record(),
          "kill_grace_seconds": 5.0, "user": "", "image": "", "health_check_json": '{"kind": "COMMAND"}'}


def test_a_report_carries_each_hosts_runs_sorted_its_updates_and_where_its_reader_stands() -> None:
    spec = AgentSpec("h1", Resources(cpu=4), {"zone": "a"}, ((31000, 31010),))
    updates = updates_by_host([TaskUpdate("j-0-1", "h1", "TASK_FINISHED", 5, exit_code=0),
                               TaskUpdate("j-1-1", "h2", "TASK_LOST", 6)])
    running = running_by_host(["j-3-1", "j-2-1", "k-0-1"], lambda t: "h2" if t.startswith("k") else "h1")
    record = report_record(spec, "agent", running["h1"], updates["h1"], 17, "", 123)
    assert record["running"] == ["j-2-1", "j-3-1"] and record["commands_read"] == 17
    assert [u["task_id"] for u in record["updates"]] == ["j-0-1"] and record["sent_ms"] == 123
    assert record["port_ranges"] == [{"low": 31000, "high": 31010}]
    name, decoded = registry().decode(registry().encode("peloton.AgentReport", record))
    assert name == "peloton.AgentReport" and decoded["host_id"] == "h1"


def test_a_command_counts_only_for_the_agents_hosts_and_only_once_sent_since_its_first_start() -> None:
    cmd = {"host_id": "h1", "sent_ms": 100, "launches": [], "kills": []}
    assert addressed("peloton.AgentCommand", cmd, {"h1"}, 100) is cmd
    assert addressed("peloton.AgentCommand", cmd, {"h1"}, 101) is None
    assert addressed("peloton.AgentCommand", cmd, {"h2"}, 0) is None
    assert addressed("peloton.SealedAgentCommand", cmd, {"h1"}, 0) is None


def test_a_launch_with_a_health_check_is_kept_so_that_a_next_agent_goes_on_checking_it() -> None:
    request = launch_request("h1", LAUNCH)
    assert (request.task_id, request.host_id, request.environment) == ("j-0-1", "h1", (("A", "1"),))
    run = run_entry("h1", LAUNCH, started=1_000.0)
    assert run["host"] == "h1" and run["health"]["started"] == 1_000.0
    checked, started = checked_request("j-0-1", run, "h1")
    assert started == 1_000.0 and checked.health_check == LAUNCH["health_check_json"]
    assert checked_request("j-0-1", run_entry("h1", {**LAUNCH, "health_check_json": None}, 0.0), "h1") is None
    assert checked_request("j-0-1", {**run, "health": {"check": "x"}}, "h1") is None  # garbled: none
