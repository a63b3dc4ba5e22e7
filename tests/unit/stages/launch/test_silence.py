"""The host manager's judgement of silent agents: lost after the timeout when the rest of its hosts
report, kept through a control-plane outage (most hosts quiet at once) or while the agent says
its runs still hold their lease, and lost regardless past the outage limit."""

from __future__ import annotations

from stages.launch.silence import judge

TIMEOUT, LEASE, LIMIT = 20.0, 18.0, 300.0


def test_a_host_silent_alone_is_lost_after_the_timeout() -> None:
    seen = {"h1": 0.0, "h2": 30.0, "h3": 30.0}
    assert judge(seen, set(), 30.0, TIMEOUT, LEASE, LIMIT, {}).lost == ["h1"]
    assert judge(seen, set(), 19.0, TIMEOUT, LEASE, LIMIT, {}).lost == []


def test_most_hosts_quiet_at_once_is_an_outage_in_which_none_is_lost_until_the_limit() -> None:
    seen = {"h1": 0.0, "h2": 0.5, "h3": 30.0}
    verdict = judge(seen, set(), 30.0, TIMEOUT, LEASE, LIMIT, {})
    assert verdict.outage and verdict.lost == [] and set(verdict.kept) == {"h1", "h2"}
    assert "control-plane outage" in verdict.kept["h1"]
    assert judge(seen, set(), 320.2, TIMEOUT, LEASE, LIMIT, {}).lost == ["h1"]  # timeout + limit past
    # A host that was DOWN before counts for neither side.
    assert not judge(seen, {"h2"}, 30.0, TIMEOUT, LEASE, LIMIT, {}).outage


def test_hosts_crossing_the_timeout_a_heartbeat_apart_are_one_outage_not_a_loss_each() -> None:
    seen = {"h1": 0.0, "h2": 1.0}
    verdict = judge(seen, set(), 20.5, TIMEOUT, LEASE, LIMIT, {})  # h1 past the timeout, h2 not yet
    assert verdict.outage and verdict.lost == []


def test_a_silent_host_whose_agent_says_its_runs_hold_their_lease_waits_for_it() -> None:
    seen = {"h1": 0.0, "h2": 30.0, "h3": 30.0}
    verdict = judge(seen, set(), 30.0, TIMEOUT, LEASE, LIMIT, {"h1": 35.0})
    assert verdict.lost == [] and "5s more" in verdict.kept["h1"]
    assert judge(seen, set(), 36.0, TIMEOUT, LEASE, LIMIT, {"h1": 35.0}).lost == ["h1"]


def test_with_no_outage_limit_every_silent_host_is_lost_at_the_timeout() -> None:
    seen = {"h1": 0.0, "h2": 0.0}
    verdict = judge(seen, set(), 21.0, TIMEOUT, LEASE, 0.0, {"h1": 99.0})
    assert not verdict.outage and verdict.lost == ["h1", "h2"]
