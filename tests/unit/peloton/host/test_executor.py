"""The run's executor (peloton/host/executor.py), run as the local driver runs it: it
ends as its command ended, and writes that down where the next agent finds it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from peloton.host.executor import LEASE_FILE, STATUS_FILE
from peloton.host.exits import read_status
from peloton.host.pidfiles import tell_executor, write_pid_file
from peloton.host.spawn import EXECUTOR_ENVIRONMENT, executor_argv


def run(tmp_path: Path, script: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([*executor_argv(), "/bin/sh", "-c", script], cwd=tmp_path,
                            env={**os.environ, **EXECUTOR_ENVIRONMENT}, start_new_session=True, **popen)


@pytest.mark.parametrize(("script", "returncode", "status"), [
    ("exit 0", 0, ("exit", "0")),
    ("exit 3", 3, ("exit", "3")),
    ("kill -TERM $$", -signal.SIGTERM, ("signal", "15")),
    ("kill -KILL $$", -signal.SIGKILL, ("signal", "9")),
    ("kill -SEGV $$", -signal.SIGSEGV, ("signal", "11")),
])
def test_it_ends_as_its_command_did_and_writes_that_down(tmp_path, script, returncode, status) -> None:
    assert run(tmp_path, script).wait(10) == returncode
    assert read_status(tmp_path) == status
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATUS_FILE]  # no core, no temporary file


def test_a_kill_sent_to_the_group_ends_the_command_not_the_executor_first(tmp_path) -> None:
    """The command gets the SIGTERM (and may exit as it likes); the executor outlives it to say so."""
    proc = run(tmp_path, "trap 'exit 7' TERM; echo up > up; while :; do sleep 0.05; done")
    deadline = time.monotonic() + 10
    while not (tmp_path / "up").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 7
    assert read_status(tmp_path) == ("exit", "7")


def test_the_command_starts_with_the_signals_a_shell_would_give_it(tmp_path) -> None:
    """Not the executor's ignored SIGTERM and the rest, nor Python's ignored SIGPIPE (a pipe's
    reader gone must end its writer, as under a shell)."""
    proc = run(tmp_path, "grep -E '^SigIgn' /proc/self/status > ignored; echo \"${PELOTON_EXECUTOR:-}\" > left")
    assert proc.wait(10) == 0
    assert (tmp_path / "left").read_text() == "\n"  # the executor's program is not the command's
    ignored = int((tmp_path / "ignored").read_text().split()[1], 16)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (signum - 1)), signum


def test_a_command_that_cannot_start_says_why(tmp_path) -> None:
    (tmp_path / "not-a-program").write_text("nothing\n")
    proc = subprocess.Popen([*executor_argv(), str(tmp_path / "not-a-program")], cwd=tmp_path,
                            env={**os.environ, **EXECUTOR_ENVIRONMENT})
    assert proc.wait(10) == 127
    kind, why = read_status(tmp_path)
    assert kind == "error" and "Permission denied" in why


@pytest.mark.parametrize("text", ["", "exit", "exit -1", "exit 1e9", "signal x", "garbage 1", "exit 12345"])
def test_a_status_file_the_task_garbled_says_nothing(tmp_path, text) -> None:
    (tmp_path / STATUS_FILE).write_text(text)
    assert read_status(tmp_path) is None


def test_what_the_task_left_under_the_status_files_names_is_never_followed(tmp_path) -> None:
    """A container's executor runs as root in a sandbox its task writes to: a link left there is
    replaced, not written through; and the agent reads no link, nor a pipe that would hold it."""
    outside = tmp_path / "outside"
    outside.write_text("root's\n")
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / (STATUS_FILE + ".tmp")).symlink_to(outside)
    assert run(sandbox, "exit 5").wait(10) == 5
    assert outside.read_text() == "root's\n" and read_status(sandbox) == ("exit", "5")
    (sandbox / STATUS_FILE).unlink()
    outside.write_text("error what root keeps\n")
    (sandbox / STATUS_FILE).symlink_to(outside)
    assert read_status(sandbox) is None
    (sandbox / STATUS_FILE).unlink()
    os.mkfifo(sandbox / STATUS_FILE)
    assert read_status(sandbox) is None


def _started(tmp_path: Path, script: str) -> subprocess.Popen:
    """An executor whose command has started (so its own handlers are in place), with its pid file
    as the local driver writes it."""
    proc = run(tmp_path, f"touch up; {script}")
    deadline = time.monotonic() + 10
    while not (tmp_path / "up").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    write_pid_file(tmp_path, proc.pid)
    return proc


def test_a_run_handed_over_is_killed_when_the_lease_runs_out_with_no_agent_holding_it(tmp_path) -> None:
    proc = _started(tmp_path, "sleep 30")
    handed_at = time.monotonic()
    assert tell_executor(tmp_path, time.time() + 0.5)
    assert proc.wait(10) == -signal.SIGKILL  # its whole group, the executor with it
    assert 0.4 < time.monotonic() - handed_at < 5
    assert read_status(tmp_path) == ("fenced", "")
    assert not tell_executor(tmp_path, time.time() + 0.5)  # nothing left to tell


def test_a_run_taken_over_by_the_next_agent_is_not_fenced_by_its_executor(tmp_path) -> None:
    # The lease (2 s) runs out before the run ends (4 s); the take-over comes well within it, even
    # on a loaded machine (0.5 s was seen to run out before it under a full suite's load).
    proc = _started(tmp_path, "sleep 4; exit 4")
    assert tell_executor(tmp_path, time.time() + 2)
    assert (tmp_path / LEASE_FILE).exists()
    assert tell_executor(tmp_path, None)  # taken over: the lease file goes, and its timer with it
    assert not (tmp_path / LEASE_FILE).exists()
    assert proc.wait(10) == 4
    assert read_status(tmp_path) == ("exit", "4")


def test_a_run_started_before_executors_is_never_sent_an_executors_signal(tmp_path) -> None:
    """Its pid file names the command itself, to which SIGUSR1 would be an end, or news of its own."""
    proc = subprocess.Popen(["sleep", "30"], cwd=tmp_path, start_new_session=True)
    try:
        write_pid_file(tmp_path, proc.pid)
        record = (tmp_path / ".peloton-pid").read_text().replace(', "executor": true', "")
        (tmp_path / ".peloton-pid").write_text(record)
        assert not tell_executor(tmp_path, time.time() + 0.5)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
