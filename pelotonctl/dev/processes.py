"""What every server the dev stack and the tests start needs: a free port, whether a process
lives, and the end of its log for an error message."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """Whether the process runs; a zombie child of ours counts as gone (the dev stack's servers
    and stages are checked the same way)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log ('' when it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def end_group(pid: int, sig: int, proc: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    """Send `sig` to the process group `pid` leads (SIGTERM: a clean shutdown) and wait until the
    leader is gone, SIGKILLing the group after `timeout`. `proc`, a child of ours, is reaped
    meanwhile so it does not linger as a zombie."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        time.sleep(0.05)
    if alive(pid):
        os.killpg(pid, signal.SIGKILL)
        while alive(pid):
            if proc is not None:
                proc.poll()
            time.sleep(0.05)
