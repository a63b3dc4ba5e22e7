from __future__ import annotations

import pytest

from stages.admit.lifecycle import SYSTEM_FAILURE_RUNS, job_state, progress_transition, task_transition


def test_a_run_moves_forward_and_ignores_repeats_and_late_events() -> None:
    assert task_transition("PENDING", 1, 1, "TASK_STAGING", 0, 0).state == "LAUNCHED"
    assert task_transition("LAUNCHED", 1, 1, "TASK_RUNNING", 0, 0).state == "RUNNING"
    assert task_transition("RUNNING", 1, 1, "TASK_RUNNING", 0, 0) is None  # repeat
    assert task_transition("RUNNING", 1, 1, "TASK_STARTING", 0, 0) is None  # late arrival
    done = task_transition("RUNNING", 1, 1, "TASK_FINISHED", 0, 0)
    assert done.state == "SUCCEEDED" and done.release and not done.retry
    assert task_transition("SUCCEEDED", 1, 1, "TASK_FAILED", 0, 0) is None  # terminal stays


def test_steps_before_launch_move_a_run_forward_only() -> None:
    state = "PENDING"
    for step in ("READY", "PLACING", "PLACED"):
        state = progress_transition(state, 1, 1, step).state
        assert state == step
    # a host manager says LAUNCHING as it hands the run on: launched (no TASK_STAGING follows)
    assert progress_transition(state, 1, 1, "LAUNCHING").state == "LAUNCHED"
    assert progress_transition("LAUNCHING", 1, 1, "LAUNCHING").state == "LAUNCHED"  # an older job manager's
    assert progress_transition("LAUNCHED", 1, 1, "LAUNCHING") is None  # after an older host manager's STAGING
    assert task_transition("LAUNCHED", 1, 1, "TASK_STAGING", 0, 0) is None
    assert progress_transition("LAUNCHED", 1, 1, "PLACED") is None  # arrived after a later state
    assert progress_transition("READY", 1, 1, "READY") is None  # a repeat
    assert progress_transition("PENDING", 2, 1, "READY") is None  # an older run's
    assert progress_transition("KILLING", 1, 1, "PLACED") is None  # stopped meanwhile
    assert progress_transition("FAILED", 1, 1, "READY") is None


def test_events_of_another_run_are_orphans() -> None:
    assert task_transition("RUNNING", 2, 1, "TASK_FINISHED", 0, 0) is None


@pytest.mark.parametrize("max_failures, runs", [(0, 1), (1, 1), (3, 3), (4, 4)])
def test_failed_runs_rerun_until_the_failure_count_reaches_max_failures(max_failures: int, runs: int) -> None:
    failures, run = 0, 1
    while True:
        move = task_transition("RUNNING", run, run, "TASK_FAILED", failures, max_failures)
        assert move.release and move.count_failure
        failures += 1
        if not move.retry:
            assert move.state == "FAILED"
            break
        run += 1
    assert run == runs


@pytest.mark.parametrize("max_failures", [0, 1, 4])
def test_a_lost_run_is_rerun_and_never_counted_as_a_failure(max_failures: int) -> None:
    # Peloton: a LOST run does not count toward maxFailures (the task did nothing wrong)
    for failures in (0, 3, 10):
        move = task_transition("RUNNING", 2, 2, "TASK_LOST", failures, max_failures)
        assert move.state == "LOST" and move.retry and move.release and not move.count_failure


def test_a_run_lost_after_a_stop_is_not_rerun() -> None:
    move = task_transition("KILLING", 1, 1, "TASK_LOST", 0, 4, reason="STOPPED")
    assert move.state == "LOST" and not move.retry and move.release
    assert task_transition("LOST", 4, 4, "TASK_RUNNING", 4, 0) is None


def test_a_run_that_could_not_start_gets_four_runs_whatever_max_failures() -> None:
    launch_failed = "REASON_CONTAINER_LAUNCH_FAILED"
    assert [task_transition("LAUNCHED", r, r, "TASK_FAILED", r - 1, 0, reason=launch_failed).retry
            for r in (1, 2, 3, 4)] == [True, True, True, False]
    assert SYSTEM_FAILURE_RUNS == 4
    # a command that ran and failed gets only what maxFailures gives it
    assert not task_transition("RUNNING", 1, 1, "TASK_FAILED", 0, 0, reason="REASON_COMMAND_EXECUTOR_FAILED").retry
    assert task_transition("RUNNING", 6, 6, "TASK_FAILED", 5, 7, reason=launch_failed).retry  # 6 < max(7, 4)


@pytest.mark.parametrize("max_failures", [0, 1, 10])
def test_an_invalid_task_description_fails_at_once_and_is_never_retried(max_failures: int) -> None:
    for current in ("LAUNCHED", "STARTING", "RUNNING"):
        move = task_transition(current, 1, 1, "TASK_ERROR", 0, max_failures)
        assert move.state == "FAILED" and move.release and move.count_failure
        assert not move.retry and not move.requeue
    assert task_transition("FAILED", 1, 1, "TASK_ERROR", 0, 10) is None
    assert task_transition("RUNNING", 2, 1, "TASK_ERROR", 0, 10) is None  # another run's event


def test_a_refused_placement_requeues_the_same_run_without_counting_a_failure() -> None:
    move = task_transition("PENDING", 1, 1, "TASK_DROPPED", 0, 0)
    assert move.requeue and move.release and not move.retry and not move.count_failure
    assert move.state == "PENDING"


def test_a_refusal_after_launch_is_stale_and_ignored() -> None:
    assert task_transition("RUNNING", 1, 1, "TASK_DROPPED", 0, 0) is None
    assert task_transition("LAUNCHED", 1, 1, "TASK_DROPPED", 0, 0) is None


@pytest.mark.parametrize("counts, current, expected", [
    ({"SUCCEEDED": 3}, "RUNNING", "SUCCEEDED"),
    ({"SUCCEEDED": 2, "FAILED": 1}, "RUNNING", "FAILED"),
    ({"SUCCEEDED": 1, "LOST": 2}, "RUNNING", "FAILED"),
    ({"SUCCEEDED": 1, "KILLED": 2}, "KILLING", "KILLED"),
    ({"RUNNING": 1, "KILLED": 1}, "KILLING", "KILLING"),
    ({"RUNNING": 1, "PENDING": 2}, "PENDING", "RUNNING"),
    ({"PENDING": 3}, "PENDING", "PENDING"),
    ({"PENDING": 3}, "SUCCEEDED", "SUCCEEDED"),
])
def test_job_state_follows_pelotons_rules_in_order(counts, current, expected) -> None:
    assert job_state(counts, 3, current) == expected


def test_a_status_that_names_no_task_of_ours_says_why() -> None:
    from stages.admit.lifecycle import status_problem

    ev = {"task_id": "j-0-1", "job_id": "j", "instance": 0, "run_id": 1, "state": "TASK_RUNNING"}
    assert status_problem(True, ev) is None
    assert status_problem(True, {**ev, "run_id": 2}) == "task id 'j-0-1' is not that of job 'j', instance 0, run 2"
    assert status_problem(True, {**ev, "run_id": 2}, id_made=True) is None  # made from them: not checked again
    assert status_problem(False, ev) == "status for unknown task 'j-0-1' (no instance 0 of job 'j')"
    assert status_problem(True, {**ev, "state": "TASK_UNKNOWN"}) == "status TASK_UNKNOWN says nothing about the task"


def test_a_preempted_run_shows_preempting_then_runs_again_without_a_failure() -> None:
    killing = task_transition("RUNNING", 1, 1, "TASK_KILLING", 0, 1, reason="PREEMPTED")
    assert killing.state == "PREEMPTING" and not killing.retry
    assert task_transition("PREEMPTING", 1, 1, "TASK_RUNNING", 0, 1) is None  # no way back
    killed = task_transition("PREEMPTING", 1, 1, "TASK_KILLED", 0, 1, reason="PREEMPTED")
    assert killed.state == "KILLED" and killed.retry and killed.release and not killed.count_failure
    # Before it was launched too: a run still PENDING in the job manager's eyes.
    assert task_transition("PENDING", 1, 1, "TASK_KILLED", 0, 1, reason="PREEMPTED").retry
    # A kill for any other reason ends the task as before.
    other = task_transition("RUNNING", 1, 1, "TASK_KILLED", 0, 1)
    assert other.state == "KILLED" and not other.retry


def test_once_a_job_is_terminal_its_controller_task_alone_decides() -> None:
    mixed = {"SUCCEEDED": 1, "FAILED": 3}
    assert job_state(mixed, 4, "RUNNING") == "FAILED"
    assert job_state(mixed, 4, "RUNNING", controller="SUCCEEDED") == "SUCCEEDED"
    assert job_state({"FAILED": 1, "SUCCEEDED": 3}, 4, "RUNNING", controller="FAILED") == "FAILED"
    assert job_state({"LOST": 1, "SUCCEEDED": 3}, 4, "RUNNING", controller="LOST") == "FAILED"
    assert job_state({"KILLED": 1, "SUCCEEDED": 3}, 4, "KILLING", controller="KILLED") == "KILLED"
    assert job_state({"RUNNING": 1, "FAILED": 3}, 4, "RUNNING", controller="RUNNING") == "RUNNING"  # not over yet


def test_a_service_task_reruns_whatever_its_end_with_a_growing_backoff() -> None:
    from stages.admit.lifecycle import service_backoff_s

    for state in ("TASK_FINISHED", "TASK_FAILED"):
        move = task_transition("RUNNING", 1, 1, state, 200, 0, service=True)
        assert move.retry and move.count_failure, state
    lost = task_transition("RUNNING", 1, 1, "TASK_LOST", 200, 0, service=True)
    assert lost.retry and not lost.count_failure  # no backoff for what the host did
    assert not task_transition("KILLING", 1, 1, "TASK_KILLED", 0, 0, reason="STOPPED", service=True).retry
    assert [service_backoff_s(n) for n in (1, 2, 3, 8, 9, 50)] == [30, 60, 120, 3600, 3600, 3600]
    assert service_backoff_s(3, base_s=0.5) == 2.0


def test_ended_runs_carry_pelotons_termination_status_words() -> None:
    from peloton.model.termination import termination_status

    assert termination_status("FAILED", "REASON_COMMAND_EXECUTOR_FAILED") == "TERMINATION_STATUS_REASON_FAILED"
    assert termination_status("KILLED", "STOPPED") == "TERMINATION_STATUS_REASON_KILLED_ON_REQUEST"
    assert termination_status("KILLED", "PREEMPTED") == "TERMINATION_STATUS_REASON_PREEMPTED_RESOURCES"
    assert termination_status("KILLED", "HOST_MAINTENANCE") == "TERMINATION_STATUS_REASON_KILLED_HOST_MAINTENANCE"
    assert termination_status("KILLED", "DEADLINE_EXCEEDED") == "TERMINATION_STATUS_REASON_DEADLINE_TIMEOUT_EXCEEDED"
    assert termination_status("DELETED", "REMOVED") == "TERMINATION_STATUS_REASON_KILLED_FOR_UPDATE"
    assert [termination_status(s, "") for s in ("SUCCEEDED", "LOST", "RUNNING")] == ["", "", ""]
