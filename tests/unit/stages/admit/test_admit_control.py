"""The job manager (AdmitStage) without a broker: a job's control commands (stop, start, restart),
updates that grow or shrink it, rolling workflows, limits on running instances, deadlines and
draining hosts."""

from __future__ import annotations

import time
import uuid

from peloton.config import Settings
from peloton.runtime import Record
from tests.builders.stages import JOB, command, control, killed_instances, record, status_record, update_command


def test_stop_kills_every_live_run_wherever_it_is_and_the_job_ends_killed(admit, store) -> None:
    stage, out = admit
    stage.handle([command("s", JOB.format(name="s", count=3, gang=0, cpu=1))])
    out.take()
    stage.handle([status_record("s-0-1", "TASK_RUNNING"), status_record("s-1-1", "TASK_FINISHED")])
    out.take()
    stage.handle([control("STOP", "s")])
    kills = [v for _, _, schema, v in out.take("placements") if schema == "peloton.TaskKill"]
    assert sorted({k["task_id"] for k in kills}) == ["s-0-1", "s-2-1"]  # the finished one is left alone
    assert len(kills) == 2 * 4 and {k["reason"] for k in kills} == {"STOPPED"}  # every host shard
    assert store.get_job("s").state == "KILLING"
    stage.handle([status_record("s-0-1", "TASK_KILLED", "STOPPED"), status_record("s-2-1", "TASK_KILLED", "STOPPED")])
    assert store.get_job("s").state == "KILLED"
    releases = [v["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.TaskRelease"]
    assert sorted(releases) == ["s-0-1", "s-2-1"]
    states = [(e["run_id"], e["state"], e["reason"]) for e in store.task_events("s") if e["instance"] == 0]
    assert states == [(1, "RUNNING", ""), (1, "KILLING", "STOPPED"), (1, "KILLED", "STOPPED")]


def test_start_runs_stopped_instances_again_and_a_command_delivered_twice_acts_once(admit, store) -> None:
    stage, out = admit
    stage.handle([command("r", JOB.format(name="r", count=4, gang=0, cpu=1))])
    stage.handle([control("STOP", "r", "1-2")])
    stage.handle([status_record("r-1-1", "TASK_KILLED", "STOPPED"), status_record("r-2-1", "TASK_KILLED", "STOPPED")])
    out.take()
    start = control("START", "r", "0-3", command_id="start-once")
    stage.handle([start])
    demand = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert sorted(t["task_id"] for g in demand for t in g["tasks"]) == ["r-1-2", "r-2-2"]  # new runs
    stage.handle([control("START", "r", "0-3", command_id="start-once")])  # redelivered
    assert out.take("task-demand") == []
    assert {t.instance: (t.run_id, t.state) for t in store.tasks_of_job("r")} == {
        0: (1, "PENDING"), 1: (2, "PENDING"), 2: (2, "PENDING"), 3: (1, "PENDING")}


def test_bad_control_commands_are_dead_letters_with_the_reason(admit, store) -> None:
    stage, out = admit
    stage.handle([command("d", JOB.format(name="d", count=2, gang=0, cpu=1))])
    out.take()
    stage.handle([control("STOP", "nobody"), control("STOP", "d", "0-5"), control("DELETE", "d"),
                  control("FROB", "d"), control("PAUSE", "d")])
    reasons = [v["reason"] for _, _, _, v in out.take("dead-letters")]
    assert reasons[0] == "no job 'nobody'"
    assert "instances '0-5': the job has instances 0-1" in reasons[1]
    assert reasons[2] == "job d is PENDING: only a terminal job is deleted (stop it first)"
    assert "unknown job command kind 'FROB'" in reasons[3]
    assert reasons[4] == "PAUSE names no update (update_id: the id `pelotonctl update list JOB` shows)"
    stage.handle([control("STOP", "d")])
    stage.handle([status_record("d-0-1", "TASK_KILLED", "STOPPED"), status_record("d-1-1", "TASK_KILLED", "STOPPED")])
    out.take()
    stage.handle([control("START", "d")])  # Peloton's rule: a terminated batch job stays ended
    [refused] = [v["reason"] for _, _, _, v in out.take("dead-letters")]
    assert refused == ("job d is KILLED: the tasks of a terminated batch job are not started again "
                       "(create the job again)")
    stage.handle([control("DELETE", "d")])
    assert store.get_job("d") is None and store.task_events("d") == []


def test_a_service_task_that_exits_runs_again_after_its_backoff(admit, store) -> None:
    stage, out = admit
    service = JOB.format(name="svc", count=1, gang=0, cpu=1).replace("name: svc", "name: svc\ntype: SERVICE")
    stage.handle([command("svc", service)])
    out.take()
    before = int(time.time() * 1000)
    stage.handle([status_record("svc-0-1", "TASK_RUNNING"), status_record("svc-0-1", "TASK_FINISHED")])
    [again] = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert again["tasks"][0]["task_id"] == "svc-0-2"
    assert again["not_before_ms"] - before >= 29_000  # 30 s after the first exit
    assert store.get_job("svc").state != "SUCCEEDED"  # a service runs until it is stopped


def restart(job_id: str, batch_size: int, command_id: str | None = None) -> Record:
    return record("job-commands", "peloton.JobCommand", {
        "command_id": command_id or uuid.uuid4().hex, "kind": "RESTART", "job_id": job_id, "pool": "/p",
        "config": None, "instances": None, "batch_size": batch_size, "requested_by": "tester", "timestamp_ms": 1},
        key=job_id)


def test_a_restart_replaces_runs_one_batch_at_a_time(admit, store) -> None:
    stage, out = admit
    stage.handle([command("rr", JOB.format(name="rr", count=3, gang=0, cpu=1))])
    stage.handle([status_record(f"rr-{i}-1", "TASK_RUNNING") for i in range(3)])
    out.take()
    stage.handle([restart("rr", batch_size=2)])
    assert killed_instances(out) == ["rr-0-1", "rr-1-1"]  # the first batch only
    stage.handle([status_record("rr-0-1", "TASK_KILLED", "RESTARTED"), status_record("rr-1-1", "TASK_KILLED",
                                                                                       "RESTARTED")])
    assert killed_instances(out) == []  # the next batch waits for the new runs to run
    assert {t.instance: t.run_id for t in store.tasks_of_job("rr")} == {0: 2, 1: 2, 2: 1}
    assert all(t.failures == 0 for t in store.tasks_of_job("rr"))
    stage.handle([status_record("rr-0-2", "TASK_RUNNING"), status_record("rr-1-2", "TASK_RUNNING")])
    assert killed_instances(out) == ["rr-2-1"]
    stage.handle([status_record("rr-2-1", "TASK_KILLED", "RESTARTED"), status_record("rr-2-2", "TASK_RUNNING")])
    assert store.get_job("rr").rollout is None and store.get_job("rr").state == "RUNNING"


def test_a_stop_during_a_restart_wins_over_the_restarts_kill(admit, store) -> None:
    stage, out = admit
    stage.handle([command("rs", JOB.format(name="rs", count=2, gang=0, cpu=1))])
    stage.handle([status_record(f"rs-{i}-1", "TASK_RUNNING") for i in range(2)])
    out.take()
    stage.handle([restart("rs", batch_size=1)])
    assert killed_instances(out) == ["rs-0-1"]
    stage.handle([control("STOP", "rs")])  # before the restart's kill has landed
    assert killed_instances(out) == ["rs-0-1", "rs-1-1"]  # the run being restarted is stopped too
    # the host manager reports the first kill's reason: the stop must still win
    stage.handle([status_record("rs-0-1", "TASK_KILLED", "RESTARTED"),
                  status_record("rs-1-1", "TASK_KILLED", "STOPPED")])
    assert [(t.run_id, t.state) for t in store.tasks_of_job("rs")] == [(1, "KILLED"), (1, "KILLED")]
    assert store.get_job("rs").state == "KILLED" and store.get_job("rs").rollout is None
    assert [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"] == []


def test_an_update_grows_the_job_and_rolls_a_changed_config_out(admit, store) -> None:
    stage, out = admit
    first = JOB.format(name="up", count=2, gang=0, cpu=1)
    stage.handle([command("up", first)])
    stage.handle([status_record(f"up-{i}-1", "TASK_RUNNING") for i in range(2)])
    out.take()

    def update(text: str) -> Record:
        return update_command("up", text, uuid.uuid4().hex)

    stage.handle([update(first.replace("instancecount: 2", "instancecount: 3"))])
    demand = [t["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"
              for t in v["tasks"]]
    assert demand == ["up-2-1"] and store.get_job("up").config_version == 2
    stage.handle([update(first.replace("name: up", "name: renamed\nlabels: [{key: team, value: x}]"))])
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "name: cannot change ('up' -> 'renamed')" in letter["reason"]
    assert "labels: cannot change ({} -> {'team': 'x'})" in letter["reason"]
    changed = first.replace("instancecount: 2", "instancecount: 3").replace("memlimitmb: 16", "memlimitmb: 32")
    stage.handle([update(changed + "changelog: {version: 2}\n")])
    assert killed_instances(out) == ["up-0-1", "up-1-1", "up-2-1"]
    stage.handle([status_record("up-0-1", "TASK_KILLED", "RESTARTED")])
    [gang] = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert gang["tasks"][0]["task_id"] == "up-0-2" and gang["tasks"][0]["resources"]["mem_mb"] == 32
    stage.handle([update(changed + "changelog: {version: 2}\n")])  # a stale version
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "changelog.version: 2 is not the job's current version 3" in letter["reason"]


def test_a_shrink_stops_the_extra_instances_highest_first_and_they_end_deleted(admit, store) -> None:
    stage, out = admit
    four = JOB.format(name="sh", count=4, gang=0, cpu=1) + "type: SERVICE\n"
    stage.handle([command("sh", four)])
    stage.handle([status_record(f"sh-{i}-1", "TASK_RUNNING") for i in range(4)])
    out.take()

    def update(text: str) -> Record:
        return update_command("sh", text, uuid.uuid4().hex)

    stage.handle([update(four.replace("instancecount: 4", "instancecount: 2"))])
    kills = [v["task_id"] for _, _, schema, v in out.take("placements") if schema == "peloton.TaskKill"]
    assert list(dict.fromkeys(kills)) == ["sh-3-1", "sh-2-1"]  # highest first
    stage.handle([status_record("sh-3-1", "TASK_KILLED", "STOPPED"), status_record("sh-2-1", "TASK_KILLED", "STOPPED")])
    tasks = {t.instance: t for t in store.tasks_of_job("sh")}
    assert [tasks[i].state for i in range(4)] == ["RUNNING", "RUNNING", "DELETED", "DELETED"]
    [why] = {e["message"] for e in store.task_events("sh") if e["state"] == "KILLING"}
    assert why.startswith("removed by update ") and why.endswith("(instanceCount 4 -> 2)")
    job = store.get_job("sh")
    assert (job.instance_count, job.state) == (2, "RUNNING")  # the removed count for nothing
    [wf] = store.updates_of_job("sh")
    assert wf["removed"] == [2, 3] and wf["state"] == "SUCCEEDED"
    # Grown again: instance 2 comes back as a new run, numbered after the removed one.
    stage.handle([update(four.replace("instancecount: 4", "instancecount: 3"))])
    demand = [t["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"
              for t in v["tasks"]]
    assert demand == ["sh-2-2"]


def test_a_rolling_stop_and_start_go_a_batch_at_a_time_as_workflows(admit, store) -> None:
    stage, out = admit
    stage.handle([command("ro", JOB.format(name="ro", count=3, gang=0, cpu=1) + "type: SERVICE\n")])
    stage.handle([status_record(f"ro-{i}-1", "TASK_RUNNING") for i in range(3)])
    out.take()

    def control(kind: str, batch: int) -> Record:
        return record("job-commands", "peloton.JobCommand", {
            "command_id": f"{kind.lower()}-1", "kind": kind, "job_id": "ro", "pool": "/p", "config": None,
            "instances": None, "batch_size": batch, "requested_by": "ann", "timestamp_ms": 1}, key="ro")

    stage.handle([control("STOP", 1)])
    assert killed_instances(out) == ["ro-0-1"]  # one at a time
    stage.handle([status_record("ro-0-1", "TASK_KILLED", "STOPPED")])
    assert killed_instances(out) == ["ro-1-1"]
    stage.handle([status_record("ro-1-1", "TASK_KILLED", "STOPPED")])
    stage.handle([status_record("ro-2-1", "TASK_KILLED", "STOPPED")])
    stop = store.get_update("stop-1")
    assert (stop["kind"], stop["state"], stop["done"]) == ("STOP", "SUCCEEDED", [0, 1, 2])
    assert store.get_job("ro").state == "KILLED"

    stage.handle([control("START", 2)])
    started = [t["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"
               for t in v["tasks"]]
    assert started == ["ro-0-2", "ro-1-2"]  # two at a time
    stage.handle([status_record("ro-0-2", "TASK_RUNNING"), status_record("ro-1-2", "TASK_RUNNING")])
    started = [t["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"
               for t in v["tasks"]]
    assert started == ["ro-2-2"]
    stage.handle([status_record("ro-2-2", "TASK_RUNNING")])
    assert store.get_update("start-1")["state"] == "SUCCEEDED" and store.get_job("ro").state == "RUNNING"


def test_maximum_running_instances_hold_the_rest_until_others_end(admit, store) -> None:
    stage, out = admit
    throttled = JOB.format(name="th", count=4, gang=0, cpu=1).replace("sla: {", "sla: {maximumRunningInstances: 2, ")
    stage.on_assign([("task-status", p) for p in range(4)])
    stage.handle([command("th", throttled)])
    sent = [t["task_id"] for _, _, s, v in out.take("task-demand") if s == "peloton.GangDemand" for t in v["tasks"]]
    assert sent == ["th-0-1", "th-1-1"]
    assert [t.state for t in store.tasks_of_job("th")] == ["PENDING", "PENDING", "INITIALIZED", "INITIALIZED"]
    stage.handle([status_record("th-0-1", "TASK_RUNNING"), status_record("th-0-1", "TASK_FINISHED")])
    sent = [t["task_id"] for _, _, s, v in out.take("task-demand") if s == "peloton.GangDemand" for t in v["tasks"]]
    assert sent == ["th-2-1"]


def test_runs_past_their_deadlines_are_killed_and_end_as_the_rule_says(admit, store) -> None:
    stage, out = admit
    stage.on_assign([("task-status", p) for p in range(4)])
    timed = JOB.format(name="dl", count=2, gang=0, cpu=1).replace("sla: {", "sla: {maxRunningTime: 1, ")
    stage.handle([command("dl", timed)])
    stage.handle([status_record("dl-0-1", "TASK_RUNNING"), status_record("dl-1-1", "TASK_STAGING")])
    out.take()
    stage.settings = Settings(launch_timeout_s=0.5)
    time.sleep(1.1)
    stage.tick(time.monotonic())
    assert killed_instances(out) == ["dl-0-1", "dl-1-1"]
    stage.handle([status_record("dl-0-1", "TASK_KILLED", "DEADLINE_EXCEEDED"),
                  status_record("dl-1-1", "TASK_KILLED", "LAUNCH_TIMEOUT")])
    tasks = {t.instance: t for t in store.tasks_of_job("dl")}
    assert (tasks[0].state, tasks[0].run_id) == ("KILLED", 1)  # over its own limit: killed, as Peloton does
    assert (tasks[1].state, tasks[1].run_id) == ("PENDING", 2)  # never started: run again


def test_runs_on_a_draining_host_move_one_budget_at_a_time_and_rerun_without_a_failure(admit, store) -> None:
    stage, out = admit
    stage.on_assign([("task-status", p) for p in range(4)])
    budgeted = JOB.format(name="sv", count=3, gang=0, cpu=1).replace("sla: {", "sla: {maximumUnavailableInstances: 1, ")
    stage.handle([command("sv", budgeted)])
    stage.handle([status_record(f"sv-{i}-1", "TASK_RUNNING") for i in range(3)])
    tasks = store.tasks_of_job("sv")
    for t in tasks:
        t.host_id = "h1"
    store.update_task_runs(tasks)
    out.take()
    now = time.monotonic()
    stage.tick(now)
    assert killed_instances(out) == []  # h1 is UP
    stage.hosts.values["h1"] = {**stage.hosts.values["h1"], "state": "DRAINING"}
    stage.tick(now + 1)
    assert killed_instances(out) == ["sv-0-1"]
    stage.tick(now + 2)
    assert killed_instances(out) == []  # instance 0 is down (KILLING): the others wait
    stage.handle([status_record("sv-0-1", "TASK_KILLED", "HOST_MAINTENANCE")])
    first = store.tasks_of_job("sv")[0]
    assert (first.state, first.run_id, first.failures) == ("PENDING", 2, 0)  # runs again, no failure counted
    stage.tick(now + 3)
    assert killed_instances(out) == []  # still down until its new run runs
    stage.handle([status_record("sv-0-2", "TASK_RUNNING", host="h2")])  # elsewhere
    stage.tick(now + 4)
    assert killed_instances(out) == ["sv-1-1"]


def test_an_end_read_again_sends_its_release_again_so_no_allocation_is_held_for_ever(admit, store) -> None:
    """A batch whose store commit landed but whose output did not (the stage was killed before
    its transaction committed) is read again: the end changes nothing in the store, but its
    release must still reach entitle (which dedupes it)."""
    stage, out = admit
    stage.handle([command("r", JOB.format(name="r", count=1, gang=0, cpu=1))])
    stage.handle([status_record("r-0-1", "TASK_RUNNING"), status_record("r-0-1", "TASK_FINISHED")])
    out.take()
    stage.handle([status_record("r-0-1", "TASK_FINISHED")])  # read again after the crash
    releases = [v["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.TaskRelease"]
    assert releases == ["r-0-1"]
    assert [e["state"] for e in store.task_events("r")].count("SUCCEEDED") == 1  # the store moved once


def test_the_late_end_of_a_run_given_up_goes_into_its_history_and_changes_nothing_else(admit, store) -> None:
    stage, out = admit
    stage.handle([command("s", JOB.format(name="s", count=1, gang=0, cpu=1))])
    stage.handle([status_record("s-0-1", "TASK_RUNNING"),
                  status_record("s-0-1", "TASK_LOST", "REASON_AGENT_DISCONNECTED")])
    out.take()
    late = status_record("s-0-1", "TASK_LOST", "REASON_AGENT_FENCED")
    late.value["host_id"] = "h1"  # its agent killed it when its lease ran out, and says so once it can
    stage.handle([late])
    assert [(e["run_id"], e["state"], e["reason"]) for e in store.task_events("s")][-2:] == [
        (1, "LOST", "REASON_AGENT_DISCONNECTED"), (1, "LOST", "REASON_AGENT_FENCED")]
    [task] = store.tasks_of_job("s")
    assert (task.run_id, task.state) == (2, "PENDING")
    assert [schema for _, _, schema, _ in out.take()] == ["peloton.TaskRelease"]  # sent again, deduped by entitle
