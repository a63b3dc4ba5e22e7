"""DAEMON jobs in the job manager (AdmitStage) without a broker: one instance bound to each
eligible host at create, a host that joins gets one, a host that leaves has its instance stopped
(within the budget while it drains) and started again when it is back; an update replaces each
instance on its own host, a host at a time; the job ends only when stopped whole."""

from __future__ import annotations

import time

from peloton.model.daemon import bound_host
from tests.builders.stages import JOB, command, control, host_state, killed_instances, status_record, update_command

DAEMON = JOB.format(name="dm", count=1, gang=0, cpu=1).replace("instancecount: 1", "type: DAEMON")


def demanded(out) -> list[str]:
    return sorted(t["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"
                  for t in v["tasks"])


def hosts_of(store, job_id: str) -> dict[int, str]:
    return {t.instance: bound_host(t.spec) for t in store.tasks_of_job(job_id)}


def test_a_daemon_starts_on_every_eligible_host_and_follows_hosts_that_join_leave_and_return(admit, store) -> None:
    stage, out = admit
    stage.on_assign([("task-status", p) for p in range(4)])
    views = stage.hosts.values
    views["h2"] = host_state("h2", cpu=4)
    views["h3"] = {**host_state("h3", cpu=4), "state": "DRAINING"}  # not eligible: no instance
    stage.handle([command("dm", DAEMON)])
    assert hosts_of(store, "dm") == {0: "h1", 1: "h2"}
    assert demanded(out) == ["dm-0-1", "dm-1-1"]
    stage.handle([status_record("dm-0-1", "TASK_RUNNING", host="h1"), status_record("dm-1-1", "TASK_RUNNING",
                                                                                     host="h2")])
    assert store.get_job("dm").state == "RUNNING"
    now = time.monotonic()

    views["h4"] = host_state("h4", cpu=4)  # joins
    stage.tick(now + 1)
    assert hosts_of(store, "dm")[2] == "h4" and demanded(out) == ["dm-2-1"]
    assert store.get_job("dm").instance_count == 3

    views["h2"] = {**views["h2"], "state": "DOWN"}  # its agent went silent
    stage.tick(now + 2)
    assert killed_instances(out) == ["dm-1-1"]
    stage.handle([status_record("dm-1-1", "TASK_KILLED", host="h2")])
    assert store.tasks_of_job("dm")[1].state == "KILLED"  # stopped, not run again elsewhere
    assert store.get_job("dm").state == "RUNNING"  # a daemon ends only when stopped whole

    views["h2"] = {**views["h2"], "state": "UP"}  # back
    stage.tick(now + 3)
    again = store.tasks_of_job("dm")[1]
    assert (again.state, again.run_id, bound_host(again.spec)) == ("PENDING", 2, "h2")
    assert demanded(out) == ["dm-1-2"]


def test_a_draining_host_s_instance_stops_within_the_budget(admit, store) -> None:
    stage, out = admit
    stage.on_assign([("task-status", p) for p in range(4)])
    views = stage.hosts.values
    views.update({h: host_state(h, cpu=4) for h in ("h2", "h3")})
    budgeted = DAEMON.replace("sla: {", "sla: {maximumUnavailableInstances: 1, ")
    stage.handle([command("dm", budgeted)])
    stage.handle([status_record(f"dm-{i}-1", "TASK_RUNNING", host=f"h{i + 1}") for i in range(3)])
    out.take()
    now = time.monotonic()
    for h in ("h1", "h2"):
        views[h] = {**views[h], "state": "DRAINING"}
    stage.tick(now + 1)
    assert killed_instances(out) == ["dm-0-1"]  # one at a time
    stage.tick(now + 2)
    assert killed_instances(out) == []  # instance 0 is still KILLING
    stage.handle([status_record("dm-0-1", "TASK_KILLED", host="h1")])
    stage.tick(now + 3)
    assert killed_instances(out) == ["dm-1-1"]


def test_an_update_replaces_each_instance_on_its_own_host_one_at_a_time(admit, store) -> None:
    stage, out = admit
    stage.on_assign([("task-status", p) for p in range(4)])
    stage.hosts.values["h2"] = host_state("h2", cpu=4)
    stage.handle([command("dm", DAEMON)])
    stage.handle([status_record(f"dm-{i}-1", "TASK_RUNNING", host=f"h{i + 1}") for i in range(2)])
    out.take()
    stage.handle([update_command("dm", DAEMON.replace("value: 'true'", "value: 'sleep 1'"), "u1")])
    job = store.get_job("dm")
    assert (job.instance_count, job.config_version, job.rollout["options"]["batch_size"]) == (2, 2, 1)
    assert killed_instances(out) == ["dm-0-1"]  # a host at a time
    stage.handle([status_record("dm-0-1", "TASK_KILLED", "RESTARTED", host="h1")])
    replaced = store.tasks_of_job("dm")[0]
    assert (replaced.run_id, bound_host(replaced.spec), replaced.spec["command"]) == (2, "h1", "sleep 1")


def test_a_daemon_stops_whole_not_by_instance(admit, store) -> None:
    stage, out = admit
    stage.handle([command("dm", DAEMON)])
    out.take()
    stage.handle([control("STOP", "dm", instances="0")])
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "a DAEMON job runs on every eligible host" in letter["reason"]
    stage.handle([control("STOP", "dm")])
    stage.handle([status_record("dm-0-1", "TASK_KILLED", host="h1")])
    assert store.get_job("dm").state == "KILLED"
