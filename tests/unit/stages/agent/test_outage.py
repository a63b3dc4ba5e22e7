"""An agent tells a control-plane outage (most of the cluster cut off from the brokers at once)
from its host cut off alone, and keeps its runs only through the first, up to the outage limit."""

from __future__ import annotations

from stages.agent.lease import Lease
from stages.agent.outage import ask_ahead, decide_ahead, most_cut_off, reaching


def test_most_of_the_cluster_counts_hosts_not_agents_and_only_peers_that_say_they_are_cut_off() -> None:
    peers = {"http://a": 1, "http://b": 1, "http://c": 3}
    assert not most_cut_off(1, peers, {"http://a": True, "http://b": True}, 6)  # 3 of 6 is not most
    assert most_cut_off(1, peers, {"http://c": True}, 6)  # 4 of 6
    # A peer that did not answer counts as reaching the brokers: toward fencing, the safe side.
    assert not most_cut_off(1, peers, {"http://c": None}, 6)
    assert not most_cut_off(1, {"http://a": 1}, {"http://a": False}, 2)  # one of two: cut off alone


def test_an_agent_alone_in_its_cluster_keeps_its_runs_as_nothing_could_run_them_elsewhere() -> None:
    assert most_cut_off(1, {}, {}, 1)
    assert most_cut_off(4, {}, {}, 0)  # host-state not read yet: its own hosts are the cluster it knows


def test_peers_are_asked_late_enough_that_a_peer_cut_off_at_the_same_moment_says_so() -> None:
    for lease_s in (3.0, 4.0, 18.0):
        asked_at_age = lease_s - ask_ahead(lease_s)
        assert not reaching(asked_at_age, lease_s)
        assert 0 < decide_ahead(lease_s) < ask_ahead(lease_s)
    assert reaching(1.0, 18.0)


def test_a_kept_lease_goes_on_a_lease_at_a_time_up_to_the_outage_limit_and_takes_no_launch() -> None:
    lease = Lease(10.0, 2.0, 100.0)
    assert lease.keep(99.5, 60.0)
    assert (lease.until, lease.kept_from) == (109.5, 100.0)
    assert not lease.admits(99.6)  # no launch starts in an outage
    assert lease.keep(155.0, 60.0) and lease.until == 160.0  # never past the end it began at + the limit
    assert not lease.keep(160.0, 60.0)
    assert lease.runs_out(160.0)


def test_a_report_that_gets_through_ends_the_outage_and_the_lease_is_the_reports_again() -> None:
    lease = Lease(10.0, 2.0, 100.0)
    assert lease.keep(99.5, 60.0)
    lease.renewed(sent=104.0, now=104.5)
    assert lease.kept_from is None and lease.until == 114.0 and lease.admits(104.5)
    assert lease.holds_for(110.0) == 4.0
    lease.fence(114.0)
    assert lease.holds_for(114.0) == 0.0
