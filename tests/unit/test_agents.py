"""Agent drivers: the simulated one (fake clock, no sleeping) and the local one (real processes)."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from peloton.config import Settings
from peloton.host.driver import AgentDriver, LaunchRequest, TaskUpdate
from peloton.host.local import LocalDriver
from peloton.host.orphans import kill_orphan, kill_orphans
from peloton.host.pidfiles import PID_FILE
from peloton.host.sandboxes import collect_sandboxes
from peloton.host.sim import SimDriver
from peloton.model.mesos import MesosState, Reason
from stages.launch.agents import make_driver

# --- helpers -----------------------------------------------------------------------------


def request(task_id: str, command: str = "true", shell: bool = True, **fields) -> LaunchRequest:
    return LaunchRequest(
        task_id=task_id, job_id="job-1", instance=0, run_id=1, host_id="host-a",
        command=command, shell=shell, **fields,
    )


def poll_until(
    driver: AgentDriver, done: Callable[[list[TaskUpdate]], bool], timeout: float = 5.0
) -> list[TaskUpdate]:
    """Poll until `done(all updates so far)` holds; fail with what was seen at the deadline."""
    deadline = time.monotonic() + timeout
    seen: list[TaskUpdate] = []
    while True:
        seen.extend(driver.poll())
        if done(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s; updates so far: {seen}")
        time.sleep(0.005)


def terminal_for(*task_ids: str) -> Callable[[list[TaskUpdate]], bool]:
    return lambda seen: set(task_ids) <= {u.task_id for u in seen if u.terminal}


def states(updates: list[TaskUpdate], task_id: str) -> list[str]:
    return [u.state for u in updates if u.task_id == task_id]


def last(updates: list[TaskUpdate], task_id: str) -> TaskUpdate:
    return [u for u in updates if u.task_id == task_id][-1]


def run_to_end(driver: AgentDriver, *task_ids: str, timeout: float = 5.0) -> list[TaskUpdate]:
    return poll_until(driver, terminal_for(*task_ids), timeout)


def wait_for_file_text(path: Path, text: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{path} never contained {text!r}"
        time.sleep(0.005)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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


# --- LocalDriver ---------------------------------------------------------------------------


@pytest.fixture
def local(tmp_path: Path):
    driver = LocalDriver(tmp_path / "sandboxes")
    yield driver
    driver.close()


def test_local_shell_task_writes_sandbox_stdout_and_finishes(local: LocalDriver) -> None:
    local.launch([request("task-1", 'echo "hello $PELOTON_TASK_ID"; echo oops >&2')])
    assert local.active() == {"task-1"}
    updates = run_to_end(local, "task-1")
    assert states(updates, "task-1") == [MesosState.TASK_STARTING, MesosState.TASK_RUNNING, MesosState.TASK_FINISHED]
    assert last(updates, "task-1").exit_code == 0
    assert (local.sandbox("task-1") / "stdout").read_text() == "hello task-1\n"
    assert (local.sandbox("task-1") / "stderr").read_text() == "oops\n"
    assert local.active() == set()


def test_sandboxes_of_runs_ended_longer_ago_than_their_keep_go_and_no_other(tmp_path: Path) -> None:
    root, outside = tmp_path / "sandboxes", tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "precious").write_text("kept")
    mode = outside.stat().st_mode
    week = 7 * 86400
    old = time.time() - week - 60

    def sandbox(name: str, pid_boot: str | None = None, age: float = old) -> Path:
        path = root / name
        path.mkdir(parents=True)
        (path / "stdout").write_text(name)
        if pid_boot is not None:
            (path / PID_FILE).write_text(json.dumps({"pgid": 4242, "start_time": 1, "boot_id": pid_boot}))
        os.utime(path, (age, age))
        return path

    sandbox("ended")
    linked = sandbox("linked")
    (linked / "out").symlink_to(outside)  # a task may point a link anywhere: never followed
    os.utime(linked, (old, old))
    locked = sandbox("locked")
    (locked / "shut").mkdir()
    (locked / "shut" / "file").write_text("x")
    os.chmod(locked / "shut", 0)
    os.utime(locked, (old, old))
    sandbox("earlier-boot", pid_boot="another-boot")  # written before a reboot: nothing of it runs
    sandbox("recent", age=time.time() - 60)
    sandbox("held")
    sandbox("running", pid_boot=boot_id())  # a run of this boot, perhaps another agent's: kept
    sandbox(".bundles")
    gone = collect_sandboxes(root, week, held={"held"}, limit=3)
    assert len(gone) == 3
    gone += collect_sandboxes(root, week, held={"held"})
    assert sorted(gone) == ["earlier-boot", "ended", "linked", "locked"]
    assert sorted(p.name for p in root.iterdir()) == [".bundles", "held", "recent", "running"]
    assert (outside / "precious").read_text() == "kept" and outside.stat().st_mode == mode


def test_a_sandbox_with_a_mount_inside_is_never_removed(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    inside = root / "mounted" / "volume"
    inside.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "none", str(inside)], capture_output=True).returncode != 0:
        pytest.skip("mounting needs root (CAP_SYS_ADMIN)")
    try:
        (inside / "data").write_text("on the mount")
        old = time.time() - 8 * 86400
        os.utime(root / "mounted", (old, old))
        assert collect_sandboxes(root, 7 * 86400, held=set()) == []
        assert (inside / "data").read_text() == "on the mount"
    finally:
        subprocess.run(["umount", str(inside)], check=True)


def test_the_local_driver_removes_an_ended_runs_sandbox_once_its_keep_is_over(tmp_path: Path) -> None:
    from peloton.host import sandboxes

    driver = LocalDriver(tmp_path / "sandboxes", sandbox_keep_seconds=0.2)
    try:
        driver.launch([request("brief"), request("long", "sleep 30")])
        run_to_end(driver, "brief")
        time.sleep(0.3)
        driver._step(time.monotonic() + sandboxes.SANDBOX_GC_SECONDS)  # a look is due
        assert not driver.sandbox("brief").exists()
        assert driver.sandbox("long").exists()  # running: kept however old
    finally:
        driver.close()


def test_local_nonzero_exit_fails_with_exit_code(local: LocalDriver) -> None:
    local.launch([request("task-1", "exit 3")])
    failed = last(run_to_end(local, "task-1"), "task-1")
    assert failed.state == MesosState.TASK_FAILED
    assert failed.exit_code == 3
    assert failed.reason == Reason.COMMAND_EXECUTOR_FAILED
    assert "code 3" in failed.message


def test_local_missing_executable_fails_without_exit_code(local: LocalDriver) -> None:
    local.launch([request("task-1", "/nonexistent/peloton-no-such-binary", shell=False)])
    (failed,) = local.poll()
    assert failed.state == MesosState.TASK_FAILED
    assert failed.exit_code is None
    assert failed.reason == Reason.CONTAINER_LAUNCH_FAILED  # a launch failure: Peloton retries it 4 times
    assert "No such file" in failed.message
    assert local.active() == set()


def test_local_exec_form_passes_arguments(local: LocalDriver) -> None:
    local.launch([request("task-1", "echo", shell=False, arguments=("a b", "c"))])
    run_to_end(local, "task-1")
    assert (local.sandbox("task-1") / "stdout").read_text() == "a b c\n"


def test_local_environment_from_request_is_visible_and_identity_wins(local: LocalDriver) -> None:
    env = (("GREETING", "hi"), ("PELOTON_TASK_ID", "spoofed"))
    req = LaunchRequest(
        task_id="task-7", job_id="job-9", instance=4, run_id=2, host_id="h",
        command='echo "$GREETING $PELOTON_JOB_ID $PELOTON_INSTANCE_ID $PELOTON_TASK_ID"',
        shell=True, environment=env,
    )
    local.launch([req])
    assert last(run_to_end(local, "task-7"), "task-7").state == MesosState.TASK_FINISHED
    assert (local.sandbox("task-7") / "stdout").read_text() == "hi job-9 4 task-7\n"


def test_local_kill_terminates_quickly(local: LocalDriver) -> None:
    local.launch([request("task-1", "sleep 30", kill_grace_seconds=0.5)])
    local.poll()
    started = time.monotonic()
    local.kill(["task-1", "unknown"])
    killed = last(run_to_end(local, "task-1"), "task-1")
    assert time.monotonic() - started < 2.0
    assert killed.state == MesosState.TASK_KILLED
    assert killed.signal == signal.SIGTERM


def test_local_kill_escalates_to_sigkill_after_grace(local: LocalDriver) -> None:
    # The shell ignores SIGTERM and so does the sleep it starts (ignored signals survive exec).
    local.launch([request("task-1", "trap '' TERM; echo ready; sleep 30", kill_grace_seconds=0.1)])
    wait_for_file_text(local.sandbox("task-1") / "stdout", "ready")
    local.kill(["task-1"])
    killed = last(run_to_end(local, "task-1"), "task-1")
    assert killed.state == MesosState.TASK_KILLED
    assert killed.signal == signal.SIGKILL


def test_local_signal_we_did_not_send_is_a_failure(local: LocalDriver) -> None:
    local.launch([request("task-1", "kill -9 $$")])
    failed = last(run_to_end(local, "task-1"), "task-1")
    assert failed.state == MesosState.TASK_FAILED
    assert failed.signal == signal.SIGKILL
    assert failed.exit_code is None


def test_local_duplicate_launch_of_active_task_is_ignored(local: LocalDriver) -> None:
    local.launch([request("task-1", "sleep 30"), request("task-1", "exit 0")])
    local.launch([request("task-1", "exit 0")])
    assert states(local.poll(), "task-1") == [MesosState.TASK_STARTING, MesosState.TASK_RUNNING]
    assert local.active() == {"task-1"}


def _live_members(pgid: int) -> list[int]:
    """Pids in process group `pgid` that are not zombies (Linux /proc)."""
    live = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # Fields after "(comm)": state, ppid, pgrp, ...
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            live.append(int(entry.name))
    return live


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("ends", ["exits", "killed"])
def test_a_process_that_left_its_tasks_session_ends_with_the_task(tmp_path: Path, ends: str) -> None:
    driver = LocalDriver(tmp_path)
    # a child in a session of its own (setsid): the kill of the task's process group misses it
    command = "setsid sh -c 'echo $$ > escaped; exec sleep 60' & " + ("sleep 1" if ends == "exits" else "sleep 60")
    driver.launch([request("t-0-1", command, kill_grace_seconds=0.2)])
    escaped = driver.sandbox("t-0-1") / "escaped"
    wait_for_file_text(escaped, "\n")
    pid = int(escaped.read_text())
    assert _alive(pid)
    if ends == "killed":
        driver.kill(["t-0-1"])
    run_to_end(driver, "t-0-1", timeout=10)
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "a process the task started outlived it"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_local_close_leaves_no_running_children(tmp_path: Path) -> None:
    driver = LocalDriver(tmp_path)
    # Each task records its process group id (its executor's pid) and forks a background child.
    command = "cut -d' ' -f5 /proc/$$/stat > pgid; sleep 30 & sleep 30 & wait"
    driver.launch([request(f"task-{i}", command, kill_grace_seconds=0.2) for i in range(3)])
    pgids = []
    for i in range(3):
        pgid_file = driver.sandbox(f"task-{i}") / "pgid"
        wait_for_file_text(pgid_file, "\n")
        pgids.append(int(pgid_file.read_text()))
    assert all(_live_members(pgid) for pgid in pgids)

    driver.close()
    driver.close()

    assert driver.active() == set()
    assert [pgid for pgid in pgids if _live_members(pgid)] == []
    updates = driver.poll()
    assert {last(updates, f"task-{i}").state for i in range(3)} == {MesosState.TASK_KILLED}
    for pgid in pgids:  # the main processes were reaped, not left as zombies
        with pytest.raises(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)


# --- orphans: tasks left running by a launch process that died without close() ---------------

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _reap_if_ours(pid: int) -> None:
    """The test process may still be the parent of a dead task leader: do not leave a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _orphan(root: Path, task_id: str, command: str) -> tuple[int, int]:
    """Start `command` (which writes its background child's pid to ./child) with a LocalDriver,
    then drop the driver without close(), as when the launch process is SIGKILLed.
    Returns (process group id, child pid)."""
    driver = LocalDriver(root)
    driver.launch([request(task_id, command)])
    sandbox = driver.sandbox(task_id)
    wait_for_file_text(sandbox / "child", "\n")
    child = int((sandbox / "child").read_text())
    pgid = json.loads((sandbox / PID_FILE).read_text())["pgid"]
    del driver
    gc.collect()
    return pgid, child


@needs_proc
def test_the_pid_file_names_the_task_group_and_its_start_time_and_goes_when_the_task_ends(
    local: LocalDriver,
) -> None:
    local.launch([request("task-1", "echo ready; sleep 30", kill_grace_seconds=0.2)])
    wait_for_file_text(local.sandbox("task-1") / "stdout", "ready")
    record = json.loads((local.sandbox("task-1") / PID_FILE).read_text())
    assert record["pgid"] in _live_members(record["pgid"])
    assert record["start_time"] == _start_time(record["pgid"])
    assert record["boot_id"] == boot_id()
    local.kill(["task-1"])
    run_to_end(local, "task-1")
    assert not (local.sandbox("task-1") / PID_FILE).exists()
    assert local.reap_orphan("task-1") is None


@needs_proc
@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the dropped driver's Popen is still running
def test_an_orphaned_task_and_the_child_it_spawned_are_killed_by_the_next_driver(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    pgid, child = _orphan(root, "task-1", "sleep 60 & echo $! > child; exec sleep 60")
    assert {pgid, child} <= set(_live_members(pgid))  # they outlived their driver

    next_owner = LocalDriver(root)
    what = next_owner.reap_orphan("task-1")

    assert what == f"orphan process group {pgid} killed (SIGTERM)"
    assert _live_members(pgid) == []
    assert next_owner.reap_orphan("task-1") is None  # nothing runs any more
    assert next_owner.active() == set()
    next_owner.close()
    _reap_if_ours(pgid)


@needs_proc
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_an_orphan_ignoring_sigterm_is_killed_with_sigkill_after_the_grace(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    pgid, child = _orphan(root, "task-1", "trap '' TERM; sleep 60 & echo $! > child; exec sleep 60")
    started = time.monotonic()

    what = kill_orphan(root, "task-1", grace_seconds=0.2)

    assert what == f"orphan process group {pgid} killed (SIGKILL after 0.2s grace)"
    assert time.monotonic() - started < 2.0
    assert _live_members(pgid) == []
    _reap_if_ours(pgid)


@needs_proc
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_leftovers_of_an_orphan_whose_main_process_ended_are_killed_too(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    pgid, child = _orphan(root, "task-1", "sleep 60 & echo $! > child")
    _reap_if_ours(pgid)  # the main process exits and is reaped (by init, once its parent is gone)
    assert _live_members(pgid) == [child]

    assert kill_orphan(root, "task-1") == f"orphan process group {pgid} killed (SIGTERM)"
    assert _live_members(pgid) == []


@needs_proc
def test_a_pid_file_naming_a_process_with_another_start_time_kills_nothing(tmp_path: Path) -> None:
    sandbox = tmp_path / "task-1"
    sandbox.mkdir()
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        record = {"pgid": stranger.pid, "start_time": _start_time(stranger.pid) + 1, "boot_id": boot_id()}
        (sandbox / PID_FILE).write_text(json.dumps(record))
        assert kill_orphan(tmp_path, "task-1", grace_seconds=0.1) is None
        assert stranger.poll() is None  # a reused pid: left alone

        record["boot_id"] = "another-boot"  # the right process, but the file is from another boot
        record["start_time"] -= 1
        (sandbox / PID_FILE).write_text(json.dumps(record))
        assert kill_orphan(tmp_path, "task-1", grace_seconds=0.1) is None
        assert stranger.poll() is None

        record["boot_id"] = boot_id()  # the same process: killed
        (sandbox / PID_FILE).write_text(json.dumps(record))
        assert kill_orphan(tmp_path, "task-1", grace_seconds=0.1) == (
            f"orphan process group {stranger.pid} killed (SIGTERM)"
        )
        assert stranger.wait(timeout=5) == -signal.SIGTERM
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.parametrize("content", [
    None, "", "garbage", "12 34", "{}", '{"pgid": "12", "start_time": 3}', '{"pgid": 1, "start_time": 3}',
    '{"pgid": 12, "start_time": null}', "[1, 2]", '{"pgid": 12.5, "start_time": 3}', b"\xff\xfe",
])
def test_a_missing_or_garbled_pid_file_kills_nothing_and_does_not_raise(tmp_path: Path, content) -> None:
    sandbox = tmp_path / "task-1"
    sandbox.mkdir()
    if isinstance(content, bytes):
        (sandbox / PID_FILE).write_bytes(content)
    elif content is not None:
        (sandbox / PID_FILE).write_text(content)
    assert kill_orphan(tmp_path, "task-1") is None
    assert LocalDriver(tmp_path).reap_orphans(["task-1"]) == {}


def test_bad_task_ids_and_missing_sandboxes_kill_nothing(tmp_path: Path) -> None:
    assert kill_orphans(tmp_path, ["", "..", "a/b", "no-such-task"], grace_seconds=float("nan")) == {}
    assert kill_orphan(tmp_path / "no-such-root", "task-1") is None


def test_the_sim_driver_has_no_orphans_to_reap() -> None:
    driver = SimDriver(task_seconds=5, clock=FakeClock())
    driver.launch([request("t1")])
    assert driver.reap_orphans(["t1", "t2"]) == {}
    assert driver.reap_orphan("t2") is None


# --- the next owner of a host shard (LaunchStage.on_assign) ----------------------------------


class _Emitted:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, str, dict]] = []

    def emit(self, topic: str, key: str, schema: str, value: dict, partition: int | None = None) -> None:
        self.records.append((topic, key, schema, value))


@needs_proc
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_the_next_owner_kills_an_orphan_before_reporting_it_lost_and_says_so(tmp_path: Path) -> None:
    from peloton.store import Launch, open_store
    from peloton.topics import Catalogue
    from stages.launch.agents.remote import RemoteDriver
    from stages.launch.inventory import parse_inventory
    from stages.launch.stage import LaunchStage

    root = tmp_path / "sandboxes"
    pgid, child = _orphan(root, "job-1-0-1", "sleep 60 & echo $! > child; exec sleep 60")
    store = open_store(tmp_path / "peloton.db")
    try:
        store.claim_launches([Launch("job-1-0-1", "job-1", 0, 1, "local-0", 1, 1, 1, 0, 5)])
        stage = LaunchStage(store, drivers={"local": LocalDriver(root), "sim": SimDriver()})
        stage.book.inventory = {h.host_id: h for h in parse_inventory("local:1", 1)}
        stage.emit = _Emitted()
        stage.catalogue = Catalogue()
        stage.settings = Settings()
        stage.remote = RemoteDriver(lambda host_id, command: None)

        stage.on_assign([("placements", 0)])

        (lost,) = [v for topic, _, _, v in stage.emit.records if topic == "task-status"]
        assert (lost["task_id"], lost["state"], lost["reason"]) == (
            "job-1-0-1", "TASK_LOST", "REASON_AGENT_DISCONNECTED")
        assert lost["message"] == (
            f"its host manager instance went away; orphan process group {pgid} killed (SIGTERM)")
        assert _live_members(pgid) == []
        assert store.active_launches(["local-0"]) == []
        stage.close()
    finally:
        store.close()
        _reap_if_ours(pgid)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_tasks_run_as_the_configured_unprivileged_user_in_a_sandbox_of_their_own(tmp_path: Path) -> None:
    import pwd

    nobody = pwd.getpwnam("nobody")
    driver = LocalDriver(tmp_path / "private" / "sandboxes", user="nobody")
    os.chmod(tmp_path / "private", 0o700)  # the directories above the sandbox are not open to the task
    driver.launch([request("u-0-1", "id -u > uid; echo written > file; cat uid")])
    updates = run_to_end(driver, "u-0-1")
    assert last(updates, "u-0-1").state == "TASK_FINISHED", last(updates, "u-0-1")
    sandbox = driver.sandbox("u-0-1")
    assert (sandbox / "uid").read_text().strip() == str(nobody.pw_uid)
    assert (sandbox / "file").stat().st_uid == nobody.pw_uid
    driver.close()
    as_root = LocalDriver(tmp_path / "root-sandboxes", user="root")  # told to: root
    as_root.launch([request("r-0-1", "id -u > uid")])
    run_to_end(as_root, "r-0-1")
    assert (as_root.sandbox("r-0-1") / "uid").read_text().strip() == "0"
    as_root.close()
    with pytest.raises(ValueError, match="no such user"):
        LocalDriver(tmp_path / "x", user="no-such-user-here")


def test_a_job_names_its_user_only_where_the_agent_allows_it(tmp_path: Path) -> None:
    """command.user: the agent runs the task as that user if PELOTON_TASK_USERS lets it (root only
    by name, never by `*`); otherwise the task fails at once, saying why."""
    from peloton.host.accounts import UserPolicy

    refused = r"command.user 'root' is not allowed on this host \(PELOTON_TASK_USERS='\*'\)"
    with pytest.raises(ValueError, match=refused):
        UserPolicy("*").account("root")
    with pytest.raises(ValueError, match="'daemon' is not allowed"):
        UserPolicy("bin, nobody").account("daemon")
    assert UserPolicy("", default="nobody").names == {"nobody"}  # the account it would use anyway
    driver = LocalDriver(tmp_path / "sandboxes", user="nobody", allowed_users="bin")
    driver.launch([request("d-0-1", "true", user="daemon")])
    failed = last(run_to_end(driver, "d-0-1"), "d-0-1")
    assert failed.state == "TASK_FAILED" and "command.user 'daemon' is not allowed on this host" in failed.message
    if os.geteuid() == 0:
        import pwd

        with pytest.raises(ValueError, match="no such user on this host"):
            UserPolicy("*").account("no-such-user-here")
        driver.launch([request("b-0-1", "id -un > who", user="bin")])
        assert last(run_to_end(driver, "b-0-1"), "b-0-1").state == "TASK_FINISHED"
        assert (driver.sandbox("b-0-1") / "who").read_text().strip() == "bin"
        assert (driver.sandbox("b-0-1")).stat().st_uid == pwd.getpwnam("bin").pw_uid
    else:
        with pytest.raises(ValueError, match="not root, and cannot switch users"):
            UserPolicy("bin").account("bin")
    driver.close()
