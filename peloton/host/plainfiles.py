"""Files the agent writes and reads in a task's sandbox. The sandbox is the task's and the agent is
root: a file is written afresh and renamed into place (a link the task left is replaced, never
written through), and read only when it is a plain file (not a link to root's files, not a pipe
that would hold the agent)."""

from __future__ import annotations

import os
from pathlib import Path
from stat import S_ISREG


def write_fresh(path: Path, text: str) -> None:
    """Writes `text` to `path` in a sandbox, whole (renamed into place), as a file made afresh:
    the task owns its sandbox and may have left anything under our names, and the agent is root
    (a link there is replaced, never written through). OSError when it cannot."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_plain(path: Path, limit: int = 4096) -> str | None:
    """The start of a file the agent wrote (or its executor did) in a sandbox, or None: what a
    task left under its name instead (a link to a file of root's, a pipe that would hold the
    agent) is not read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, limit).decode(errors="replace") if S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)

