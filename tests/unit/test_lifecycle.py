from __future__ import annotations

import pytest

from stages.admit.lifecycle import job_state, task_transition


def test_a_run_moves_forward_and_ignores_repeats_and_late_events() -> None:
    assert task_transition("PENDING", 1, 1, "TASK_STAGING", 0, 0).state == "LAUNCHED"
    assert task_transition("LAUNCHED", 1, 1, "TASK_RUNNING", 0, 0).state == "RUNNING"
    assert task_transition("RUNNING", 1, 1, "TASK_RUNNING", 0, 0) is None  # repeat
    assert task_transition("RUNNING", 1, 1, "TASK_STARTING", 0, 0) is None  # late arrival
    done = task_transition("RUNNING", 1, 1, "TASK_FINISHED", 0, 0)
    assert done.state == "SUCCEEDED" and done.release and not done.retry
    assert task_transition("SUCCEEDED", 1, 1, "TASK_FAILED", 0, 0) is None  # terminal stays


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
