"""Which drains `host maintenance start` refuses without --force."""

from peloton.config import Settings
from pelotonctl.admin import maintenance_problem


def hosts(*states: str) -> list[dict]:
    return [{"host_id": f"h{i}", "state": s} for i, s in enumerate(states)]


def test_the_last_up_host_is_not_drained_without_force() -> None:
    assert "last UP host" in maintenance_problem(hosts("UP", "DOWN"), "h0", 1.0)
    assert maintenance_problem(hosts("UP", "UP"), "h0", 0.5) is None


def test_no_more_than_the_allowed_share_of_hosts_is_in_maintenance_at_once() -> None:
    four = hosts("UP", "UP", "DRAINING", "UP")
    assert maintenance_problem(four, "h0", 0.5) is None  # 2 of 4
    problem = maintenance_problem(hosts("UP", "UP", "DRAINING", "DRAINED"), "h0", 0.5)
    assert "3 of 4 hosts" in problem and "50%" in problem


def test_settings_that_do_not_fit_are_named_with_their_numbers() -> None:
    assert Settings().problems() == []
    problems = Settings(agent_timeout_s=9.0, agent_heartbeat_s=2.0, max_drain_share=0).problems()
    assert any("agent lease (5s" in p and "3 heartbeats" in p for p in problems), problems
    assert any("PELOTON_MAX_DRAIN_SHARE=0" in p for p in problems)
    assert any("PELOTON_LAUNCH_TIMEOUT_S" in p for p in Settings(launch_timeout_s=5).problems())
    assert Settings(released_keep_s=9 * 86400).problems() == [
        "PELOTON_RELEASED_KEEP_S=777600 must be below 777600s (nine days): a deleted job's id is taken again "
        "after that, and its new runs would look like the old job's ended ones"]
    assert any("PELOTON_JOB_RETENTION_S=-1 must be 0" in p for p in Settings(job_retention_s=-1).problems())
    assert any("PELOTON_SANDBOX_KEEP_S=-1 must be 0" in p for p in Settings(sandbox_keep_s=-1).problems())
    assert any("agent lease (1.5s" in p and "at least 3s" in p
               for p in Settings(agent_heartbeat_s=0.5, agent_timeout_s=3.5).problems())
    shortest = Settings(agent_heartbeat_s=0.5, agent_timeout_s=5.0)  # lease 3 s, 6 heartbeats
    assert shortest.problems() == [] and shortest.agent_lease() == 3.0
