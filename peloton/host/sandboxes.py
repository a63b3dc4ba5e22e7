"""A run's sandbox: <sandbox_root>/<task_id>/, its job's own (0700), holding its stdout and stderr
(0600) and a TMPDIR; and the collection of sandboxes whose runs ended long ago, as Mesos' agent
does after its gc_delay. The agent is root and the sandbox is the task's: nothing here follows a
link a task left, or reads what is not a plain file."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from .environment import TMP_DIR
from .identities import Account, own_tree
from .pidfiles import PID_FILE, read_pid_file, this_boot

SANDBOX_GC_SECONDS = 60.0  # how often sandboxes past their keep are looked for


SANDBOX_GC_BATCH = 1_000  # and how many one look removes at most (a whole batch: the next poll looks again)


def sandbox_path(sandbox_root: str | Path, task_id: str) -> Path:
    """<sandbox_root>/<task_id>; task ids must be plain names, not paths (ValueError otherwise)."""
    if task_id in ("", ".", "..") or "/" in task_id or "\0" in task_id:
        raise ValueError(f"task id {task_id!r} cannot name a sandbox directory")
    return Path(sandbox_root) / task_id


def open_sandbox(sandbox: Path, account: Account | None) -> tuple[int, int]:
    """Makes the run's sandbox its job's own (0700, owned by its account, with a TMPDIR inside)
    and opens its stdout and stderr (0600) to append to: a relaunch under the same id keeps the
    earlier attempt's output, and whatever an earlier attempt left there becomes this account's.
    A link left under those names is not followed (the agent is root). The two descriptors."""
    existed = sandbox.is_dir()
    sandbox.mkdir(mode=0o700, exist_ok=True)
    os.chmod(sandbox, 0o700, follow_symlinks=False)
    with contextlib.suppress(FileExistsError):  # its own, from an earlier attempt (whatever it made of it)
        (sandbox / TMP_DIR).mkdir(mode=0o700)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fds = [os.open(sandbox / name, flags, 0o600) for name in ("stdout", "stderr")]
    try:
        for fd in fds:
            os.fchmod(fd, 0o600)
        if account is not None:
            if existed:
                own_tree(sandbox, None, account.uid, account.gid)
            else:
                for path in (sandbox, sandbox / TMP_DIR):
                    os.lchown(path, account.uid, account.gid)
                for fd in fds:
                    os.fchown(fd, account.uid, account.gid)
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return fds[0], fds[1]


def collect_sandboxes(sandbox_root: Path, keep_seconds: float, held: set[str],
                      limit: int = SANDBOX_GC_BATCH) -> list[str]:
    """Remove the sandboxes of runs that ended more than keep_seconds ago, as Mesos' agent does
    after its gc_delay; returns their names. A sandbox changes last when its run's pid file goes at
    its end, so its own mtime says when. Kept whatever their age: the runs `held`, those whose
    pid file is from this boot (still running, an adopted run, or ending now: other agents of the
    machine share the root), names starting with a dot (the bundles), and any with a mount inside."""
    cutoff = time.time() - keep_seconds
    boot = this_boot()
    mounts = _mount_points()
    gone: list[str] = []
    try:
        entries = list(os.scandir(sandbox_root))
    except OSError:
        return gone
    for entry in entries:
        if len(gone) >= limit:
            break
        name = entry.name
        try:
            if name.startswith(".") or name in held or not entry.is_dir(follow_symlinks=False) or \
                    entry.stat(follow_symlinks=False).st_mtime >= cutoff:
                continue
        except OSError:
            continue
        path = Path(entry.path)
        pid = read_pid_file(path)
        if (pid is not None and (pid[2] is None or pid[2] == boot)) or \
                ((path / PID_FILE).exists() and pid is None):
            continue  # a run of this boot (or a pid file not read): it may still run
        real = path.resolve()  # mountinfo names real paths
        if any(m == real or real in m.parents for m in mounts):
            continue
        if _remove_tree(path):
            gone.append(name)
    return gone


def _mount_points() -> list[Path]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    # Field 5 is the mount point, with spaces and such written as octal escapes.
    return [Path(line.split()[4].encode().decode("unicode_escape")) for line in lines if len(line.split()) > 4]


def _remove_tree(path: Path) -> bool:
    """rmtree; where that fails (an agent not running as root runs tasks as itself, and a task may
    leave a directory it made unreadable), make the task's directories the agent's again first.
    Links are never followed: a task may point one anywhere. Whether it is gone."""
    try:
        shutil.rmtree(path)
        return True
    except OSError:
        pass
    _own(path)
    for dirpath, dirnames, _files in os.walk(path):  # top-down: each directory made readable before it is read
        for d in dirnames:
            _own(Path(dirpath) / d)
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


def _own(path: Path) -> None:
    try:
        if not path.is_symlink():
            os.chmod(path, 0o700)
    except OSError:
        pass


def disk_mb(directory: Path) -> float:
    """What a sandbox holds on disk (allocated blocks, as du counts them), symbolic links not followed."""
    total, stack = 0, [str(directory)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total / (1024 * 1024)


