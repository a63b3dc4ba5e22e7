"""Agent drivers by name (make_driver) and the simulated one: a fake clock, no sleeping."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from peloton.host.local import LocalDriver
from peloton.host.sim import SimDriver
from peloton.model.mesos import MesosState, Reason
from stages.launch.agents import make_driver
from tests.builders.agents import FakeClock, poll_until, request, states

# --- make_driver ---------------------------------------------------------------------------


def test_make_driver_builds_known_drivers(tmp_path: Path) -> None:
    assert isinstance(make_driver("sim", task_seconds=0), SimDriver)
    local = make_driver("local", sandbox_root=tmp_path)
    assert isinstance(local, LocalDriver)
    local.close()


def test_make_driver_rejects_unknown_name_listing_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown agent driver 'mesos'.*local, sim"):
        make_driver("mesos")


# --- SimDriver -----------------------------------------------------------------------------


def test_sim_reports_starting_running_then_finished_after_duration() -> None:
    clock = FakeClock()
    driver = SimDriver(task_seconds=10, clock=clock)
    driver.launch([request("t1")])
    assert driver.active() == {"t1"}

    first = driver.poll()
    assert [u.state for u in first] == [MesosState.TASK_STARTING, MesosState.TASK_RUNNING]
    assert all(u.host_id == "host-a" for u in first)

    clock.now += 9.9
    assert driver.poll() == []
    clock.now += 0.1
    (done,) = driver.poll()
    assert (done.state, done.exit_code) == (MesosState.TASK_FINISHED, 0)
    assert driver.active() == set()
    assert driver.poll() == []


def test_sim_zero_duration_keeps_state_order_within_one_poll() -> None:
    driver = SimDriver(task_seconds=0, clock=FakeClock())
    driver.launch([request("t1"), request("t2")])
    updates = driver.poll()
    for task_id in ("t1", "t2"):
        assert states(updates, task_id) == [MesosState.TASK_STARTING, MesosState.TASK_RUNNING, MesosState.TASK_FINISHED]


def test_sim_ten_thousand_tasks_finish_quickly() -> None:
    driver = SimDriver(task_seconds=0)
    started = time.monotonic()
    driver.launch([request(f"t{i}") for i in range(10_000)])
    updates = poll_until(driver, lambda seen: sum(u.terminal for u in seen) == 10_000)
    assert time.monotonic() - started < 5.0
    assert len(updates) == 30_000
    assert driver.active() == set()


def test_sim_poll_reports_only_expired_tasks_among_many_active() -> None:
    clock = FakeClock()
    driver = SimDriver(task_seconds=3600, clock=clock)
    driver.launch([request(f"t{i}") for i in range(100_000)])
    driver.poll()
    driver.launch([request("short", environment=(("PELOTON_SIM_SECONDS", "1"),))])
    driver.poll()
    clock.now += 1
    assert [(u.task_id, u.state) for u in driver.poll()] == [("short", MesosState.TASK_FINISHED)]
    assert len(driver.active()) == 100_000
    # Poll cost with many active tasks is measured by the benchmark, not asserted here.


def test_sim_environment_overrides_duration_and_exit_code() -> None:
    clock = FakeClock()
    driver = SimDriver(task_seconds=100, clock=clock)
    env = (("PELOTON_SIM_SECONDS", "2.5"), ("PELOTON_SIM_EXIT_CODE", "7"))
    driver.launch([request("bad", environment=env), request("slow")])
    driver.poll()
    clock.now += 2.5
    (failed,) = driver.poll()
    assert failed.task_id == "bad"
    assert failed.state == MesosState.TASK_FAILED
    assert failed.exit_code == 7
    assert failed.reason == Reason.COMMAND_EXECUTOR_FAILED
    assert driver.active() == {"slow"}


def test_sim_invalid_environment_override_fails_the_task() -> None:
    driver = SimDriver(task_seconds=0, clock=FakeClock())
    driver.launch([request("t1", environment=(("PELOTON_SIM_SECONDS", "soon"),))])
    (update,) = driver.poll()
    assert update.state == MesosState.TASK_FAILED
    assert "PELOTON_SIM_SECONDS" in update.message
    assert driver.active() == set()


def test_sim_failure_rate_one_fails_every_task_with_exit_code_1() -> None:
    driver = SimDriver(task_seconds=0, failure_rate=1.0, clock=FakeClock())
    driver.launch([request(f"t{i}") for i in range(20)])
    terminal = [u for u in driver.poll() if u.terminal]
    assert len(terminal) == 20
    assert {(u.state, u.exit_code, u.reason) for u in terminal} == {
        (MesosState.TASK_FAILED, 1, Reason.COMMAND_EXECUTOR_FAILED)
    }


def test_sim_seed_makes_failures_reproducible() -> None:
    def failed_ids(seed: int) -> list[str]:
        driver = SimDriver(task_seconds=0, failure_rate=0.5, seed=seed, clock=FakeClock())
        driver.launch([request(f"t{i}") for i in range(200)])
        return [u.task_id for u in driver.poll() if u.state == MesosState.TASK_FAILED]

    assert failed_ids(42) == failed_ids(42)
    assert 0 < len(failed_ids(42)) < 200


def test_sim_kill_reports_killed_at_next_poll_and_wins_over_deadline() -> None:
    clock = FakeClock()
    driver = SimDriver(task_seconds=5, clock=clock)
    driver.launch([request("t1"), request("t2")])
    driver.poll()
    driver.kill(["t1", "unknown"])
    assert driver.active() == {"t1", "t2"}  # active until the kill is reported
    clock.now += 5  # t1's deadline passes in the same poll as its kill
    updates = driver.poll()
    assert [(u.task_id, u.state) for u in updates] == [("t1", MesosState.TASK_KILLED), ("t2", MesosState.TASK_FINISHED)]
    assert driver.active() == set()
    driver.kill(["t1"])  # already terminal: ignored
    assert driver.poll() == []


def test_sim_kill_before_first_poll_keeps_order() -> None:
    driver = SimDriver(task_seconds=5, clock=FakeClock())
    driver.launch([request("t1")])
    driver.kill(["t1"])
    assert states(driver.poll(), "t1") == [MesosState.TASK_STARTING, MesosState.TASK_RUNNING, MesosState.TASK_KILLED]


def test_sim_duplicate_launch_of_active_task_is_ignored() -> None:
    clock = FakeClock()
    driver = SimDriver(task_seconds=5, clock=clock)
    driver.launch([request("t1"), request("t1")])
    driver.poll()
    clock.now += 3
    driver.launch([request("t1")])  # would push the deadline to +8 if it were accepted
    assert driver.poll() == []
    clock.now += 2
    assert states(driver.poll(), "t1") == [MesosState.TASK_FINISHED]


def test_sim_close_kills_everything_and_is_idempotent() -> None:
    driver = SimDriver(task_seconds=5, clock=FakeClock())
    driver.launch([request("t1"), request("t2")])
    driver.close()
    driver.close()
    assert driver.active() == set()
    updates = driver.poll()
    assert states(updates, "t1")[-1] == MesosState.TASK_KILLED
    assert states(updates, "t2")[-1] == MesosState.TASK_KILLED
    with pytest.raises(RuntimeError):
        driver.launch([request("t3")])
