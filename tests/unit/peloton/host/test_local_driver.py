"""The local agent driver with real processes: sandboxes, exits, kills, signals, the task's
session and process group, and the user a task runs as."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from peloton.host.driver import LaunchRequest, TaskUpdate
from peloton.host.local import LocalDriver
from peloton.host.pidfiles import PID_FILE
from peloton.host.sandboxes import collect_sandboxes
from peloton.model.mesos import MesosState, Reason
from tests.builders.agents import boot_id, live_members, request, run_to_end, states, wait_for_file_text


def last(updates: list[TaskUpdate], task_id: str) -> TaskUpdate:
    return [u for u in updates if u.task_id == task_id][-1]


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
    assert all(live_members(pgid) for pgid in pgids)

    driver.close()
    driver.close()

    assert driver.active() == set()
    assert [pgid for pgid in pgids if live_members(pgid)] == []
    updates = driver.poll()
    assert {last(updates, f"task-{i}").state for i in range(3)} == {MesosState.TASK_KILLED}
    for pgid in pgids:  # the main processes were reaped, not left as zombies
        with pytest.raises(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)


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
