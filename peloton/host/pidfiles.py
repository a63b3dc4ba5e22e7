"""Pid files: each started run's <sandbox>/.peloton-pid names its process group and who leads it
beyond the pid (the leader's start time, /proc/<pid>/stat field 22, and the boot id), so that the
next owner of the host can find the run's processes, or tell its executor of a lease, and never
touch a process that merely reuses the pid. Linux /proc is needed to verify a process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from .executor import LEASE_FILE
from .plainfiles import read_plain, write_fresh

PID_FILE = ".peloton-pid"  # in the task's sandbox; tasks must leave it alone


@dataclass(frozen=True, slots=True)
class ProcStat:
    state: str  # R, S, D, Z, ...
    pgrp: int
    session: int
    start_time: int  # clock ticks after boot (field 22)


def proc_stat(pid: int) -> ProcStat | None:
    """The few /proc/<pid>/stat fields we need, or None if there is no such process (or no /proc)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        # Fields after "(comm)", which may itself hold spaces and parentheses, start at field 3.
        fields = raw.rsplit(")", 1)[1].split()
        return ProcStat(fields[0], int(fields[2]), int(fields[3]), int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None


def this_boot() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def write_pid_file(sandbox: Path, pid: int) -> None:
    """Record the task's process group (= its executor's pid) and who that leader is, atomically."""
    stat = proc_stat(pid)
    record = {"pgid": pid, "start_time": stat.start_time if stat else None, "boot_id": this_boot(), "executor": True}
    write_fresh(sandbox / PID_FILE, json.dumps(record) + "\n")


# How long a hand-over waits for an executor that has just started to set its handlers.
_EXECUTOR_READY_WAIT_S = 1.0


def tell_executor(sandbox: Path, lease_until: float | None) -> bool:
    """Tells a run's executor until when (seconds since the epoch) the run may go on with no agent,
    or (None) that an agent holds it again. False when it has no executor alive to tell."""
    pid = executor_of(sandbox)
    if pid is None:
        return False
    if lease_until is None and not (sandbox / LEASE_FILE).exists():
        return True  # never told to fence: nothing to call off
    # SIGUSR1 ends an executor that has not yet set its handler (it is one that just started).
    deadline = time.monotonic() + _EXECUTOR_READY_WAIT_S
    while not _catches(pid, signal.SIGUSR1):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    try:
        if lease_until is None:
            (sandbox / LEASE_FILE).unlink(missing_ok=True)
        else:
            write_fresh(sandbox / LEASE_FILE, f"{lease_until:.3f}\n")
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return False
    return True


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler set for the signal (SigCgt in /proc/<pid>/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return False


def _read_pid_record(sandbox: Path) -> dict | None:
    try:
        record = json.loads(read_plain(sandbox / PID_FILE) or "")
        pgid, start_time, boot_id = record["pgid"], record["start_time"], record.get("boot_id")
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    valid = (
        type(pgid) is int and pgid > 1 and type(start_time) is int and start_time >= 0
        and (boot_id is None or isinstance(boot_id, str))
    )
    return record if valid else None


def read_pid_file(sandbox: Path) -> tuple[int, int, str | None] | None:
    """(pgid, start time, boot id) from a task's pid file, or None if missing or garbled."""
    record = _read_pid_record(sandbox)
    return None if record is None else (record["pgid"], record["start_time"], record.get("boot_id"))


def executor_of(sandbox: Path) -> int | None:
    """The pid of the run's executor, alive, as its pid file names it (pid, start time and boot),
    or None: the run ended, or started before executors (its leader is the command itself, which
    must not be sent an executor's signals)."""
    record = _read_pid_record(sandbox)
    if record is None or record.get("executor") is not True:
        return None
    if record.get("boot_id") is not None and record["boot_id"] != this_boot():
        return None
    leader = proc_stat(record["pgid"])
    if leader is None or leader.state == "Z" or leader.start_time != record["start_time"]:
        return None
    return record["pgid"]


def remove_pid_file(sandbox: Path) -> None:
    with contextlib.suppress(OSError):
        (sandbox / PID_FILE).unlink(missing_ok=True)

