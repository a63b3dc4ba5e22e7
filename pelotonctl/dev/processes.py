"""What every server the dev stack and the tests start needs: a free port, whether a process
lives, and the first errors and the end of its log for an error message."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

# Where free_port looks: up to the kernel's ephemeral range, never in it. A port from that range
# (what binding port 0 gives) can be taken, between being found free and being bound by the
# server it is for, by any outgoing connection on the machine (a broker would then exit on
# start). Below the range only another listener can take it.
PORTS_FROM = 20000
_choose = random.SystemRandom()  # not the tests' seeded random: two workers would pick alike
# A chosen port is claimed here (one empty file per port) for CLAIM_S: a server may bind it only
# seconds later (a cluster chooses all its ports before its first node starts), and in that gap
# it could be found free again and given twice.
# Claims are shared by every process of this user on the machine; an old one is taken over.
CLAIMS_DIR = Path(tempfile.gettempdir()) / f"peloton-ports-{os.getuid()}"
CLAIM_S = 300.0


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def ephemeral_floor() -> int:
    """The lowest port the kernel hands to outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port no one listens on, for a server of ours to bind a moment later (see PORTS_FROM)."""
    floor = ephemeral_floor()
    if floor - PORTS_FROM >= 1000:
        for _ in range(100):
            port = _choose.randrange(PORTS_FROM, floor)
            if port_is_free(port) and _claim(port):
                return port
    with socket.socket() as s:  # a machine whose range leaves no room below it
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _claim(port: int) -> bool:
    """Whether this process may have the port: no other chose it less than CLAIM_S ago."""
    mark = CLAIMS_DIR / str(port)
    try:
        CLAIMS_DIR.mkdir(mode=0o700, exist_ok=True)
        if time.time() - mark.stat().st_mtime < CLAIM_S:
            return False
        mark.unlink(missing_ok=True)  # an old claim: its server has bound the port or gone
    except FileNotFoundError:
        pass
    except OSError:
        return True  # no place for claims (a read-only tmp): choose as before
    try:
        os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False  # another process claimed it this instant
    except OSError:
        return True
    return True


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


def first_errors(path: Path, start: int = 0, lines: int = 6) -> str:
    """The first ERROR and FATAL lines the log has from byte `start` on (where a start of the
    server began): what made it stop, which the log's tail, the shutdown that followed, no longer
    shows ('' when there are none)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join([line for line in text.splitlines() if " ERROR " in line or " FATAL " in line][:lines])


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
