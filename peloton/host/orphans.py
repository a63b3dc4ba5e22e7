"""Orphans: a run's processes outlive its driver when the process that held it dies without
closing it (SIGKILL). The next owner of the host finds them by their pid files (pidfiles.py) and
stops them; strays that left their run's process group carry its PELOTON_TASK_ID in the
environment they were started with."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from .pidfiles import proc_stat, read_pid_file, remove_pid_file, this_boot
from .sandboxes import sandbox_path

DEFAULT_ORPHAN_GRACE_SECONDS = 2.0  # SIGTERM -> SIGKILL for orphans (the task spec is not at hand)


MAX_ORPHAN_GRACE_SECONDS = 10.0  # the new owner blocks while it waits, so the grace is capped


_ORPHAN_SIGKILL_WAIT_SECONDS = 1.0  # how long to wait for a SIGKILLed group to disappear


_ORPHAN_POLL_SECONDS = 0.02


def kill_escapees(task_ids: set[str]) -> int:
    """SIGKILL every process of these tasks that left its task's process group (a child that
    called setsid, a daemon that double-forked): each still carries its task's PELOTON_TASK_ID in
    the environment it was started with, which is how it is found (session tracking, as build
    servers find a build's strays). One /proc scan for all; a process that cleared its environment
    escapes it, which a cgroup per task closes. Returns how many were killed."""
    if not task_ids:
        return 0
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return 0
    killed = 0
    me = os.getpid()
    for pid in pids:
        if pid != me and _task_id_of(pid) in task_ids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(pgid, signum)


def live_groups() -> dict[int, list[int]]:
    """Process group id -> pids of its members that are not zombies, from one /proc scan."""
    groups: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return groups
    for name in entries:
        if name.isdigit():
            stat = proc_stat(int(name))
            if stat is not None and stat.state != "Z":
                groups.setdefault(stat.pgrp, []).append(int(name))
    return groups


def _task_id_of(pid: int) -> str | None:
    """PELOTON_TASK_ID from the environment the process was started with, if readable."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(b"PELOTON_TASK_ID="):
            return entry.split(b"=", 1)[1].decode(errors="replace")
    return None


def _orphan_group(sandbox_root: Path, task_id: str, groups: dict[int, list[int]]) -> int | None:
    """The process group id of the task's processes if some still run here, else None."""
    try:
        record = read_pid_file(sandbox_path(sandbox_root, task_id))
    except (ValueError, TypeError):  # not a usable task id
        return None
    if record is None:
        return None
    pgid, start_time, boot_id = record
    if boot_id is not None and boot_id != this_boot():
        return None  # written before a reboot (or on another machine): none of it runs here
    leader = proc_stat(pgid)
    if leader is not None and leader.start_time != start_time:
        return None  # the pid was reused by another process
    if leader is not None and leader.state != "Z":
        return pgid  # the task's own leader, alive
    # The leader has ended; members left in its group may still run. The kernel does not reuse a
    # pid while a group or session of that id exists, yet the group could belong to a later
    # process that got the pid after the task's group was gone, so members must also carry the
    # task's identity in the environment they were started with.
    for pid in groups.get(pgid, ()):
        stat = proc_stat(pid)
        if stat is not None and stat.start_time >= start_time and _task_id_of(pid) == task_id:
            return pgid
    return None


def kill_orphans(
    sandbox_root: str | Path, task_ids: Iterable[str], grace_seconds: float = DEFAULT_ORPHAN_GRACE_SECONDS
) -> dict[str, str]:
    """Stop the processes of tasks that a dead driver started on this machine and left running.

    For each task whose pid file names a process group that still runs here (its leader verified
    by start time and boot id): SIGTERM the group, wait up to `grace_seconds` (capped at
    MAX_ORPHAN_GRACE_SECONDS) for every group together, then SIGKILL what is left. Returns task
    id -> a short description of what was done, only for tasks that had something running.
    Never raises: a missing or garbled pid file, a bad task id or processes that are gone all
    mean nothing to do.
    """
    root = Path(sandbox_root)
    try:
        grace = float(grace_seconds)
    except (TypeError, ValueError):
        grace = DEFAULT_ORPHAN_GRACE_SECONDS
    grace = min(grace, MAX_ORPHAN_GRACE_SECONDS) if grace >= 0 else 0.0  # NaN -> 0 too
    groups = live_groups()
    found: dict[str, int] = {}
    for task_id in task_ids:
        pgid = _orphan_group(root, task_id, groups)
        if pgid is not None:
            found[task_id] = pgid
    if not found:
        return {}
    done: dict[str, str] = {}
    for task_id, pgid in found.items():
        problem = _send_group(pgid, signal.SIGTERM)
        if problem:
            done[task_id] = f"orphan process group {pgid} could not be stopped: {problem}"
    terminated = {t: g for t, g in found.items() if t not in done}
    left = _wait_groups_gone(terminated, time.monotonic() + grace)
    for pgid in left.values():
        _send_group(pgid, signal.SIGKILL)
    stuck = _wait_groups_gone(left, time.monotonic() + _ORPHAN_SIGKILL_WAIT_SECONDS)
    kill_escapees(set(terminated))
    for task_id, pgid in terminated.items():
        if task_id in stuck:
            done[task_id] = f"orphan process group {pgid} still running after SIGKILL"
            continue
        how = f"SIGKILL after {grace:g}s grace" if task_id in left else "SIGTERM"
        done[task_id] = f"orphan process group {pgid} killed ({how})"
        remove_pid_file(root / task_id)
    return done


def surviving_groups(sandbox_root: str | Path, task_ids: Iterable[str]) -> dict[str, int]:
    """Task id -> process group, for the tasks (started by an earlier driver) whose processes
    still run here, each verified by its pid file (one /proc scan for all of them)."""
    groups = live_groups()
    found = {t: _orphan_group(Path(sandbox_root), t, groups) for t in task_ids}
    return {t: g for t, g in found.items() if g is not None}


def kill_orphan(
    sandbox_root: str | Path, task_id: str, grace_seconds: float = DEFAULT_ORPHAN_GRACE_SECONDS
) -> str | None:
    """kill_orphans() for one task: what was done, or None when nothing of it was running."""
    return kill_orphans(sandbox_root, [task_id], grace_seconds).get(task_id)


def _send_group(pgid: int, signum: int) -> str | None:
    """Signal a process group; a problem worth reporting, or None (sent, or the group is gone)."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _wait_groups_gone(groups: dict[str, int], deadline: float) -> dict[str, int]:
    """Wait until the groups have no live members or the deadline passes; those still alive."""
    while True:
        live = live_groups()
        left = {t: g for t, g in groups.items() if g in live}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_ORPHAN_POLL_SECONDS)

