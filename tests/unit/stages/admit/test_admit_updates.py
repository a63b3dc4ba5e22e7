"""The job manager (AdmitStage) without a broker: a service's update as a workflow (pause, resume,
rollback, abort), runs' health, in-place restarts and a new owner taking over."""

from __future__ import annotations

import uuid

from peloton.runtime import Record
from peloton.topics import partition_for
from tests.builders.stages import JOB, command, control, killed_instances, record, status_record, update_command

SERVICE = JOB.replace("name: {name}", "name: {name}\ntype: SERVICE")


def steer_update(kind: str, job_id: str, update_id: str) -> Record:
    return record("job-commands", "peloton.JobCommand", {
        "command_id": uuid.uuid4().hex, "kind": kind, "job_id": job_id, "pool": "/p", "update_id": update_id,
        "requested_by": "tester", "timestamp_ms": 1}, key=job_id)


def running_service(stage, out, job_id: str, count: int) -> str:
    text = SERVICE.format(name=job_id, count=count, gang=0, cpu=1)
    stage.handle([command(job_id, text)])
    stage.handle([status_record(f"{job_id}-{i}-1", "TASK_RUNNING") for i in range(count)])
    out.take()
    return text


def test_an_update_is_a_workflow_that_pauses_resumes_and_ends_succeeded(admit, store) -> None:
    stage, out = admit
    text = running_service(stage, out, "wf", 3)
    stage.handle([update_command("wf", text.replace("memlimitmb: 16", "memlimitmb: 32"), "u1", batch_size=1)])
    assert killed_instances(out) == ["wf-0-1"]
    wf = store.get_update("u1")
    assert (wf["state"], wf["in_flight"], wf["remaining"], wf["from_version"], wf["to_version"]) == (
        "ROLLING_FORWARD", [0], [1, 2], 1, 2)
    assert store.get_job("wf").rollout["update_id"] == "u1"
    stage.handle([steer_update("PAUSE", "wf", "u1")])
    stage.handle([status_record("wf-0-1", "TASK_KILLED", "RESTARTED"), status_record("wf-0-2", "TASK_RUNNING")])
    assert killed_instances(out) == []  # paused: the next batch waits
    wf = store.get_update("u1")
    assert (wf["state"], wf["done"], wf["message"]) == ("PAUSED", [0], "paused by tester")
    stage.handle([steer_update("PAUSE", "wf", "u1")])
    assert [v["reason"] for _, _, _, v in out.take("dead-letters")] == ["update u1 is paused already"]
    stage.handle([steer_update("RESUME", "wf", "u1")])
    assert killed_instances(out) == ["wf-1-1"]
    for i in (1, 2):
        stage.handle([status_record(f"wf-{i}-1", "TASK_KILLED", "RESTARTED"),
                      status_record(f"wf-{i}-2", "TASK_RUNNING")])
    wf = store.get_update("u1")
    assert (wf["state"], wf["done"], wf["completed_ms"] is not None) == ("SUCCEEDED", [0, 1, 2], True)
    assert store.get_job("wf").rollout is None
    assert store.job_config("wf", 1) == text and store.job_config("wf", 2) == store.get_job("wf").config_text
    stage.handle([steer_update("ABORT", "wf", "u1")])
    assert [v["reason"] for _, _, _, v in out.take("dead-letters")] == [
        "update u1 is SUCCEEDED already: nothing to abort"]


def test_an_update_whose_new_runs_fail_rolls_back_to_the_old_config(admit, store) -> None:
    stage, out = admit
    text = running_service(stage, out, "fb", 3)
    bad = text.replace("value: 'true'", "value: 'exit 3'")
    stage.handle([update_command("fb", bad, "u2", batch_size=1, max_instance_retries=2, max_failure_instances=1,
                                 rollback_on_failure=True)])
    assert killed_instances(out) == ["fb-0-1"]
    stage.handle([status_record("fb-0-1", "TASK_KILLED", "RESTARTED"), status_record("fb-0-2", "TASK_RUNNING")])
    assert killed_instances(out) == ["fb-1-1"]  # RUNNING: done, for now
    stage.handle([status_record("fb-0-2", "TASK_FAILED")])  # a service reruns it: one failure
    assert store.get_update("u2")["state"] == "ROLLING_FORWARD"
    stage.handle([status_record("fb-0-3", "TASK_RUNNING"), status_record("fb-0-3", "TASK_FAILED")])
    wf = store.get_update("u2")
    assert (wf["state"], wf["to_version"], wf["rolled_back"]) == ("ROLLING_BACKWARD", 3, [0, 1])
    assert "1 instance failed (0), max-failure-instances 1: rolling back" in wf["message"]
    job = store.get_job("fb")
    assert (job.config_version, job.config_text) == (3, text)  # the old config, as a new version
    assert killed_instances(out) == ["fb-0-4"]  # the rollback's first batch: the failing instance first
    out.take("task-demand")
    stage.handle([status_record("fb-0-4", "TASK_KILLED", "RESTARTED")])
    [gang] = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert gang["tasks"][0]["task_id"] == "fb-0-5" and "exit 3" not in str(gang["tasks"][0]["command"])
    stage.handle([status_record("fb-0-5", "TASK_RUNNING")])
    assert killed_instances(out) == []  # fb-1-1 is being replaced already: its next run has the old config
    assert store.get_update("u2")["in_flight"] == [1]
    stage.handle([status_record("fb-1-1", "TASK_KILLED", "RESTARTED"), status_record("fb-1-2", "TASK_RUNNING")])
    wf = store.get_update("u2")
    assert (wf["state"], wf["done"]) == ("ROLLED_BACK", [0, 1])
    assert store.get_job("fb").rollout is None and [t.run_id for t in store.tasks_of_job("fb")] == [5, 2, 1]


def test_an_update_whose_last_batch_runs_while_an_earlier_instance_failed_waits_for_that_one(admit, store) -> None:
    """Seen in CI: every instance's new run RUNNING, the first already failed once and waiting
    out its backoff; the update ended SUCCEEDED before the second failure that would roll it
    back. It waits now for such an instance to run again, or to fail by its retries."""
    stage, out = admit

    def last_batch_running(job: str, update_id: str) -> None:
        text = running_service(stage, out, job, 2)
        stage.handle([update_command(job, text.replace("value: 'true'", "value: 'exit 3'"), update_id, batch_size=1,
                                     max_instance_retries=2, max_failure_instances=1, rollback_on_failure=True)])
        assert killed_instances(out) == [f"{job}-0-1"]
        stage.handle([status_record(f"{job}-0-1", "TASK_KILLED", "RESTARTED"),
                      status_record(f"{job}-0-2", "TASK_RUNNING")])
        assert killed_instances(out) == [f"{job}-1-1"]
        stage.handle([status_record(f"{job}-0-2", "TASK_FAILED")])  # one failure: its next run waits
        stage.handle([status_record(f"{job}-1-1", "TASK_KILLED", "RESTARTED"),
                      status_record(f"{job}-1-2", "TASK_RUNNING")])
        wf = store.get_update(update_id)
        assert wf["state"] == "ROLLING_FORWARD" and wf["in_flight"] == [], wf
        assert wf["message"] == "waits: not running well since their new runs started: instances 0"

    last_batch_running("lb", "u4")  # its next run fails at once, RUNNING and FAILED in one report
    stage.handle([status_record("lb-0-3", "TASK_RUNNING"), status_record("lb-0-3", "TASK_FAILED")])
    wf = store.get_update("u4")
    assert wf["state"] == "ROLLING_BACKWARD" and "max-failure-instances 1: rolling back" in wf["message"]

    last_batch_running("lc", "u5")  # its next run runs: the update is done
    stage.handle([status_record("lc-0-3", "TASK_RUNNING")])
    wf = store.get_update("u5")
    assert (wf["state"], wf["message"]) == ("SUCCEEDED", ""), wf


def test_a_run_being_replaced_that_ends_on_its_own_first_reruns_with_the_jobs_config_as_it_is_now(admit, store) -> None:
    """The kill of a replacement (an update's, a rollback's) can come after the run ended by
    itself: its next run is still the replacement, not a retry of the config it ran (a rollback
    ran the broken config again on an instance whose run exited before the kill landed)."""
    stage, out = admit
    text = running_service(stage, out, "oe", 2)
    new = text.replace("value: 'true'", "value: 'echo new'")
    stage.handle([update_command("oe", new, "u3", batch_size=1)])
    assert killed_instances(out) == ["oe-0-1"]
    out.take("task-demand")
    stage.handle([status_record("oe-0-1", "TASK_FAILED")])  # exited before the kill reached it
    [gang] = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert gang["tasks"][0]["task_id"] == "oe-0-2" and "echo new" in str(gang["tasks"][0]["command"])


def test_a_new_update_aborts_the_one_in_progress_and_a_stop_aborts_any(admit, store) -> None:
    stage, out = admit
    text = running_service(stage, out, "ab", 2)
    stage.handle([update_command("ab", text.replace("memlimitmb: 16", "memlimitmb: 32"), "u3", batch_size=1,
                                 start_paused=True)])
    assert killed_instances(out) == []  # started paused
    assert store.get_update("u3")["state"] == "PAUSED"
    stage.handle([record("job-commands", "peloton.JobCommand", {
        "command_id": "r4", "kind": "RESTART", "job_id": "ab", "pool": "/p", "batch_size": 1,
        "requested_by": "tester", "timestamp_ms": 1}, key="ab")])
    superseded = store.get_update("u3")
    assert superseded["state"] == "ABORTED" and superseded["message"] == "superseded by update r4"
    assert (store.get_update("r4")["kind"], store.get_update("r4")["state"]) == ("RESTART", "ROLLING_FORWARD")
    assert killed_instances(out) == ["ab-0-1"]
    stage.handle([record("job-commands", "peloton.JobCommand", {
        "command_id": "r5", "kind": "RESTART", "job_id": "ab", "pool": "/p", "batch_size": -1,
        "requested_by": "tester", "timestamp_ms": 1}, key="ab")])
    assert [v["reason"] for _, _, _, v in out.take("dead-letters")] == ["batch-size -1: must be 0 or more"]
    stage.handle([steer_update("ROLLBACK", "ab", "r4")])
    assert [v["reason"] for _, _, _, v in out.take("dead-letters")] == [
        "update r4 is a restart: it has no earlier config to go back to"]
    stage.handle([control("STOP", "ab")])
    wf = store.get_update("r4")
    assert (wf["state"], wf["message"]) == ("ABORTED", "the job was stopped by tester")
    assert [u["update_id"] for u in store.updates_of_job("ab")] == ["r4", "u3"]


def test_an_abort_stops_the_rollout_where_it_is(admit, store) -> None:
    stage, out = admit
    text = running_service(stage, out, "at", 3)
    stage.handle([update_command("at", text.replace("memlimitmb: 16", "memlimitmb: 32"), "u5", batch_size=1)])
    assert killed_instances(out) == ["at-0-1"]
    stage.handle([steer_update("ABORT", "at", "u5")])
    stage.handle([status_record("at-0-1", "TASK_KILLED", "RESTARTED"), status_record("at-0-2", "TASK_RUNNING")])
    assert killed_instances(out) == []
    assert store.get_update("u5")["state"] == "ABORTED" and store.get_job("at").rollout is None
    assert [t.run_id for t in store.tasks_of_job("at")] == [2, 1, 1]


def health_record(task_id: str, health: str, message: str = "") -> Record:
    job_id, instance, run = task_id.rsplit("-", 2)
    return record("task-status", "peloton.TaskStatus", {
        "event_id": uuid.uuid4().hex, "task_id": task_id, "job_id": job_id, "instance": int(instance),
        "run_id": int(run), "host_id": "h1", "state": "TASK_RUNNING", "health": health, "message": message,
        "reason": "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED" if message else "", "exit_code": None, "signal": None,
        "timestamp_ms": 1}, key=job_id)


def test_a_runs_health_is_kept_and_each_change_is_in_its_history_once(admit, store) -> None:
    stage, out = admit
    stage.handle([command("hc", SERVICE.format(name="hc", count=1, gang=0, cpu=1))])
    stage.handle([health_record("hc-0-1", "HEALTH_UNKNOWN")])  # the TASK_RUNNING of a run with a check
    assert store.tasks_of_job("hc")[0].health == "HEALTH_UNKNOWN"
    stage.handle([health_record("hc-0-1", "HEALTHY", "health check passed: command exited 0")])
    stage.handle([health_record("hc-0-1", "HEALTHY", "health check passed: command exited 0")])  # a repeat
    stage.handle([health_record("hc-0-0", "UNHEALTHY", "an older run")])  # not the current run
    [task] = store.tasks_of_job("hc")
    assert (task.state, task.health) == ("RUNNING", "HEALTHY")
    said = [e["message"] or "" for e in store.task_events("hc") if e["state"] == "RUNNING"]
    assert [m for m in said if "HEALTHY" in m] == ["HEALTHY: health check passed: command exited 0"]
    stage.handle([status_record("hc-0-1", "TASK_FAILED", "REASON_TASK_UNHEALTHY")])
    [task] = store.tasks_of_job("hc")
    assert (task.run_id, task.state, task.health) == (2, "PENDING", "")  # a service runs again, health unknown


def test_an_in_place_restart_asks_for_each_runs_own_host(admit, store) -> None:
    stage, out = admit
    running_service(stage, out, "ip", 2)
    for in_place, cid in ((True, "r1"), (False, "r2")):
        stage.handle([record("job-commands", "peloton.JobCommand", {
            "command_id": cid, "kind": "RESTART", "job_id": "ip", "pool": "/p", "in_place": in_place,
            "requested_by": "tester", "timestamp_ms": 1}, key="ip")])
        runs = {t.instance: t.run_id for t in store.tasks_of_job("ip")}
        out.take("task-demand")
        stage.handle([status_record(f"ip-{i}-{runs[i]}", "TASK_KILLED", "RESTARTED", host=f"host-{i}") for i in (0, 1)])
        gangs = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
        assert {g["tasks"][0]["instance"]: g["tasks"][0]["prefer_host"] for g in gangs} == (
            {0: "host-0", 1: "host-1"} if in_place else {0: "", 1: ""})
        stage.handle([status_record(f"ip-{i}-{runs[i] + 1}", "TASK_RUNNING") for i in (0, 1)])
        assert store.get_update(cid)["state"] == "SUCCEEDED"


def test_a_takeover_kills_again_the_runs_a_killed_owner_left_killing(admit, store) -> None:
    """The last owner stored a stop (its runs KILLING, the command claimed) and died before its
    transaction sent the kills: the redelivered command is claimed already, so the new owner of
    the jobs' status partitions sends every KILLING run's kill again."""
    stage, out = admit
    stage.handle([command("k", JOB.format(name="k", count=3, gang=0, cpu=1))])
    stage.handle([status_record("k-0-1", "TASK_RUNNING"), status_record("k-1-1", "TASK_FINISHED")])
    stage.handle([control("STOP", "k")])
    out.take()  # the kills the killed owner never sent
    stage.on_revoke([("task-status", p) for p in range(4)] + [("job-commands", p) for p in range(4)])
    stage.handle([control("STOP", "k")])  # redelivered: claimed, it acts no more
    assert out.take("placements") == []
    theirs = partition_for("k", 4)
    stage.on_assign([("task-status", p) for p in range(4) if p != theirs])
    assert out.take("placements") == []  # not the job's partition: nothing
    stage.on_assign([("task-status", theirs), ("job-commands", theirs)])
    kills = [v for _, _, schema, v in out.take("placements") if schema == "peloton.TaskKill"]
    assert sorted({k["task_id"] for k in kills}) == ["k-0-1", "k-2-1"] and len(kills) == 2 * 4
    assert {k["reason"] for k in kills} == {"STOPPED"}
    stage.handle([status_record("k-0-1", "TASK_KILLED", "STOPPED"), status_record("k-2-1", "TASK_KILLED", "STOPPED")])
    assert store.get_job("k").state == "KILLED"
    out.take()
    stage.on_revoke([("task-status", theirs)])
    stage.on_assign([("task-status", theirs)])
    assert out.take("placements") == []  # none KILLING any more


def test_a_create_under_a_taken_job_id_is_refused_unless_it_is_the_same_create_again(admit, store) -> None:
    """Ids chosen by their senders (Peloton's job create -i) can collide: another job under a
    taken id is refused with the reason; the same create delivered again (even after an update
    changed the job's config) is applied, as a redelivery must be."""
    stage, out = admit
    text = running_service(stage, out, "taken", 2)
    first = command("taken", text)
    stage.handle([first])
    assert out.take("dead-letters") == []
    stage.handle([command("taken", text.replace("memlimitmb: 16", "memlimitmb: 32"))])
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "job taken exists already with another config or pool: a job id names one job" in letter["reason"]
    stage.handle([update_command("taken", text.replace("memlimitmb: 16", "memlimitmb: 24"), "u-taken", batch_size=2)])
    out.take()
    stage.handle([first])  # the create itself again, after the update
    assert out.take("dead-letters") == [] and store.command_outcome(first.value["command_id"])["state"] == "applied"
