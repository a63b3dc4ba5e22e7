"""Every run's executor holds its agent's lease (a dead man's switch): it kills its run when the
lease the agent last wrote runs out, whatever the agent does meanwhile, and its command never
sees the lease's file."""

from __future__ import annotations

import time
from pathlib import Path

from peloton.host.leasefile import LeaseFile
from peloton.host.local import LocalDriver
from peloton.model.mesos import MesosState, Reason
from tests.builders.agents import request, run_to_end, wait_for_file_text


def driver_with_lease(tmp_path: Path, lease_s: float) -> LocalDriver:
    driver = LocalDriver(tmp_path / "sandboxes", lease_file=tmp_path / "executor-lease")
    driver.extend_lease(time.monotonic() + lease_s)
    return driver


def test_a_run_whose_agent_stops_extending_the_lease_is_killed_at_its_end_and_reported_fenced(tmp_path) -> None:
    driver = driver_with_lease(tmp_path, 1.0)
    try:
        started = time.monotonic()
        driver.launch([request("t-1", "touch up; sleep 30")])
        wait_for_file_text(driver.sandbox("t-1") / "up", "", timeout=5)
        (end,) = [u for u in run_to_end(driver, "t-1", timeout=10) if u.terminal]
        assert 0.9 < time.monotonic() - started < 6
        assert (end.state, end.reason) == (MesosState.TASK_LOST, Reason.AGENT_FENCED)
        assert "lease ran out" in end.message
    finally:
        driver.close()


def test_a_lease_extended_in_time_keeps_the_run_going_past_its_first_end(tmp_path) -> None:
    driver = driver_with_lease(tmp_path, 0.6)
    try:
        driver.launch([request("t-1", "sleep 2.5; exit 3")])
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # as acknowledged reports would, every 0.2 s
            driver.extend_lease(time.monotonic() + 0.6)
            time.sleep(0.2)
        driver.extend_lease(time.monotonic() + 5)
        (end,) = [u for u in run_to_end(driver, "t-1", timeout=10) if u.terminal]
        assert (end.state, end.exit_code) == (MesosState.TASK_FAILED, 3)
    finally:
        driver.close()


def test_the_command_gets_neither_the_lease_file_nor_its_variable(tmp_path) -> None:
    driver = driver_with_lease(tmp_path, 30.0)
    lease = tmp_path / "executor-lease"
    try:
        driver.launch([request("t-1", 'echo "[$PELOTON_LEASE_FD]"; ls -l /proc/$$/fd')])
        run_to_end(driver, "t-1", timeout=10)
        out = (driver.sandbox("t-1") / "stdout").read_text()
        assert out.startswith("[]\n") and str(lease) not in out
    finally:
        driver.close()


def test_the_lease_file_is_written_in_place_and_read_whole(tmp_path) -> None:
    lease = LeaseFile(tmp_path / "executor-lease")
    inode = (tmp_path / "executor-lease").stat().st_ino
    lease.write(12345.5)
    lease.write(99.25)  # shorter: no tail of the longer line is left
    assert lease.read() == 99.25
    assert (tmp_path / "executor-lease").stat().st_ino == inode  # the executors' descriptors read it still
    assert (tmp_path / "executor-lease").read_text().split() == ["99.250", "99.250"]
    lease.close()
