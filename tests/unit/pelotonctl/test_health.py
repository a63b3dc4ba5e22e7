"""What a job's status and task list say about the cluster behind the job, without a broker: the
stages it waits on that are not doing their part, and the hosts of its runs whose agents are silent."""

from __future__ import annotations

import time

from pelotonctl.health import StageHealth, clock, health_lines, silent_hosts, stage_problems, stages_of

NOW = int(time.mktime((2026, 5, 4, 12, 5, 0, 0, 0, -1)) * 1000)  # local time, as the lines say it
AT_12_03_10 = NOW - 110_000


def words(**statuses: str) -> dict[str, StageHealth]:
    return {stage: StageHealth(stage, status, AT_12_03_10, f"{stage} detail") for stage, status in statuses.items()}


def host(host_id: str, state: str = "UP", reachable: bool = True, job_tasks: dict | None = None) -> dict:
    return {"host_id": host_id, "state": state, "reachable": reachable, "updated_ms": AT_12_03_10,
            "job_tasks": job_tasks or {}}


def test_a_job_waits_on_admit_and_launch_while_it_runs_on_every_stage_while_tasks_wait_and_on_none_once_ended():
    assert stages_of("RUNNING", {"RUNNING": 16}) == ("admit", "launch")
    assert stages_of("RUNNING", {"RUNNING": 15, "PENDING": 1}) == ("admit", "entitle", "place", "launch")
    assert stages_of("PENDING", {"INITIALIZED": 2}) == ("admit", "entitle", "place", "launch")
    assert stages_of("SUCCEEDED", {"SUCCEEDED": 16}) == ()


def test_a_stage_with_no_live_instance_is_said_with_what_the_job_misses_and_since_when():
    problems = stage_problems(words(admit="OK", entitle="STOP", place="OK", launch="STOP"), ("admit", "launch"))
    assert problems == [{"stage": "launch", "status": "STOP", "since_ms": AT_12_03_10, "effect": "statuses not applied",
                         "why": "launch has no live instance", "detail": "launch detail"}]
    assert health_lines({"stage_problems": problems}, NOW) == [
        "statuses not applied since 12:03:10: launch has no live instance"]


def test_a_stalled_or_slow_stage_says_so_with_the_samplers_sentence_and_ok_or_unknown_say_nothing():
    problems = stage_problems(words(admit="STALL", entitle="WARN", place="ERR", launch="UNKNOWN"),
                              ("admit", "entitle", "place", "launch"))
    assert [(p["stage"], p["why"]) for p in problems] == [
        ("admit", "admit is not reading its input: admit detail"),
        ("entitle", "entitle is not keeping up: entitle detail"),
        ("place", "place's offsets are wrong: place detail")]
    assert [p["effect"] for p in problems] == ["statuses not applied", "pending tasks not admitted",
                                               "pending tasks not placed"]
    assert stage_problems({}, ("admit", "launch")) == []  # no word from the sampler: nothing said


def test_silent_hosts_are_those_down_and_unreachable_that_hold_the_jobs_runs_or_are_named():
    hosts = [host("h1", "DOWN", False, {"j": 4}), host("h2", "DOWN", True, {"j": 1}),  # h2: maintenance
             host("h3", "UP", True, {"j": 2}), host("h4", "DOWN", False, {"other": 3}), host("h5", "DOWN", False)]
    assert silent_hosts(hosts, "j") == [{"host_id": "h1", "since_ms": AT_12_03_10, "tasks": 4}]
    assert [h["host_id"] for h in silent_hosts(hosts, "j", ["h5"])] == ["h1", "h5"]
    assert health_lines({"silent_hosts": silent_hosts(hosts, "j")}, NOW) == [
        "host h1 silent since 12:03:10: its agent stopped reporting, so what runs there is not known; 4 tasks of "
        "this job were there"]


def test_a_time_of_another_day_carries_its_date():
    assert clock(AT_12_03_10, NOW) == "12:03:10"
    assert clock(AT_12_03_10 - 86_400_000, NOW) == "2026-05-03 12:03:10"
