"""What each lockable component freezes: reading jobs (Read), changing them (Write), stopping runs
(Kill); pools, hosts and tokens are never locked; Peloton's other components are refused with why."""

from __future__ import annotations

from peloton.model.lockdown import component_of_action, component_of_command, component_problem, locked_out


def test_each_action_and_command_needs_its_component_unlocked() -> None:
    assert [component_of_action(a) for a in ("job.read", "job.create", "update.pause", "job.stop", "pool.create",
                                              "host.maintenance", "token.issue")] == [
        "Read", "Write", "Write", "Kill", None, None, None]
    assert [component_of_command(k) for k in ("CREATE", "UPDATE", "RESTART", "STOP", "DELETE")] == [
        "Write", "Write", "Write", "Kill", "Write"]
    locks = {"Kill": {"locked_ms": 5, "locked_by": "ops"}}
    assert locked_out("Write", locks) is None and locked_out(None, locks) is None
    assert locked_out("Kill", locks).startswith("the cluster is locked down for Kill by ops")
    assert component_problem("Write") is None
    assert "no goal-state engine" in component_problem("GoalStateEngine")
    assert "not supported" in component_problem("Launch")
    assert "no component 'write'" in component_problem("write")
