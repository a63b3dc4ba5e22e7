"""A DAEMON job's rules (peloton.model.daemon): the pin that binds an instance to its host, which
hosts are eligible, and what the reconciler does as hosts join, leave, drain and come back."""

from __future__ import annotations

import json

from peloton.model.constraint import AndConstraint, LabelConstraint, constraint_to_record
from peloton.model.daemon import bound_hosts, daemon_spec, eligible, host_of, pin, pinned, reconcile, why_not
from peloton.model.jobconfig import parse_job_config

RACK_A = LabelConstraint("HOST", "EQUAL", "rack", "a", 1)
CONFIG = """name: logs
type: DAEMON
instanceCount: 7
defaultConfig:
  resource: {cpuLimit: 0.1, memLimitMb: 16}
  command: {value: 'sleep 600'}
"""


def host(host_id: str, state: str = "UP", **labels: str) -> dict:
    return {"host_id": host_id, "state": state, "labels": {"hostname": host_id, **labels}}


def test_the_pin_binds_an_instance_and_is_read_back_from_its_launch_spec() -> None:
    assert host_of(pinned(None, "h1")) == "h1"
    assert pinned(RACK_A, "h1") == AndConstraint((RACK_A, pin("h1")))
    assert host_of(pinned(RACK_A, "h1")) == "h1" and host_of(RACK_A) is None and host_of(None) is None
    specs = {0: {"constraint_json": json.dumps(constraint_to_record(pinned(RACK_A, "h2")))},
             1: {"constraint_json": None}, 2: None}
    assert bound_hosts(specs) == {0: "h2"}


def test_a_daemon_config_is_a_template_expanded_once_per_host() -> None:
    spec = parse_job_config(CONFIG)
    assert spec.instance_count == 1 and any("instanceCount is not used" in n for n in spec.notices)
    expanded = daemon_spec(spec, ["h1", "h2"])
    assert expanded.instance_count == 2
    assert [host_of(t.constraint) for t in expanded.tasks] == ["h1", "h2"]
    assert [t.instance for t in expanded.tasks] == [0, 1]
    assert daemon_spec(spec, []).tasks == ()


def test_eligible_hosts_are_up_and_match_the_job_s_host_labels() -> None:
    assert eligible(host("h1"), None) and not eligible(host("h1", "DRAINING"), None)
    assert eligible(host("h1", rack="a"), RACK_A) and not eligible(host("h2", rack="b"), RACK_A)
    assert why_not(host("h2", rack="b"), RACK_A) == "the host's labels do not match the job's constraint"
    assert why_not(host("h3", "DOWN"), None) == "the host is DOWN"
    assert why_not(None, None).startswith("the host is gone")


def test_the_reconciler_adds_stops_and_starts_as_hosts_change() -> None:
    hosts = {"h1": host("h1"), "h2": host("h2", "DOWN"), "h3": host("h3"), "h4": host("h4")}
    bound = {0: "h1", 1: "h2", 2: "h3"}
    states = {0: "RUNNING", 1: "RUNNING", 2: "KILLED"}
    plan = reconcile(None, bound, states, hosts, budget=0)
    assert (plan.add, plan.stop, plan.start) == (["h4"], [1], [2])
    again = reconcile(None, bound, {0: "RUNNING", 1: "KILLED", 2: "PENDING"}, hosts, budget=0)
    assert (again.add, again.stop, again.start) == (["h4"], [], [])
    assert again.waiting == {"h3": "instance 2 is PENDING"}


def test_drained_hosts_give_up_their_instances_within_the_budget_down_ones_regardless() -> None:
    hosts = {"h1": host("h1", "DRAINING"), "h2": host("h2", "DRAINING"), "h3": host("h3", "DOWN"), "h4": host("h4")}
    bound = {0: "h1", 1: "h2", 2: "h3", 3: "h4"}
    running = dict.fromkeys(bound, "RUNNING")
    plan = reconcile(None, bound, running, hosts, budget=1)
    assert plan.stop == [0, 2]  # one drained within the budget; the DOWN host's instance is down already
    assert "disruption budget" in plan.waiting["h2"]
    assert reconcile(None, bound, running, hosts, budget=0).stop == [0, 1, 2]  # no budget: no limit
    busy = {**running, 0: "KILLING"}
    assert reconcile(None, bound, busy, hosts, budget=1).stop == [2]


def test_a_host_that_stops_matching_the_constraint_loses_its_instance() -> None:
    hosts = {"h1": host("h1", rack="a"), "h2": host("h2", rack="b")}
    plan = reconcile(RACK_A, {0: "h1", 1: "h2"}, {0: "RUNNING", 1: "RUNNING"}, hosts, budget=0)
    assert (plan.add, plan.stop) == ([], [1])


def test_a_daemon_s_instances_are_its_hosts_so_per_instance_configs_are_refused() -> None:
    import pytest

    from peloton.model.jobspec import JobConfigError

    with pytest.raises(JobConfigError) as refused:
        parse_job_config(CONFIG + "instanceConfig:\n  0: {command: {value: 'sleep 1'}}\n")
    assert "a DAEMON job's instances are its hosts" in str(refused.value)
    with pytest.raises(JobConfigError) as batch_only:
        parse_job_config(CONFIG.replace("type: DAEMON", "type: DAEMON\nsla: {maximumRunningInstances: 2}"))
    assert "a DAEMON job may not set it" in str(batch_only.value)
