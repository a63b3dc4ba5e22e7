"""Files and folders only their owner reads: every secret the cluster keeps on a machine (a
broker's passwords and keys, the dev stack's tokens, an agent's record of its runs) is written
0600 in a folder of 0700, since tasks of every team share the machine. PELOTON_HOME itself is
0711: runs enter their sandboxes below it and may list nothing there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

HOME_MODE = 0o711  # passable, not listable: the sandboxes below it are reached by their own path


def private_dir(path: str | Path) -> Path:
    """`path` made (with its parents) if missing, and 0700 whatever it was."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def open_home(path: str | Path) -> Path:
    """PELOTON_HOME made if missing and set passable but not listable (HOME_MODE)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, HOME_MODE)
    return path


def write_private(path: str | Path, text: str | bytes) -> Path:
    """`text` written whole to `path`, 0600 from its first byte (renamed into place, so a reader
    never sees half, and a link left under the name is replaced, not written through)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)
    os.replace(tmp, path)
    return path


def readable_by_others(top: str | Path) -> list[Path]:
    """Files and folders under `top` that another user could read or list: readable by others
    (o+r), every folder on the way down passable by them (o+x). Links are not followed."""
    top = Path(top)
    found: list[Path] = []
    if not os.stat(top).st_mode & 0o001:
        return found
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        for name in [*dirnames, *filenames]:
            try:
                mode = os.lstat(here / name).st_mode
            except OSError:
                continue
            if not stat.S_ISLNK(mode) and mode & 0o004:
                found.append(here / name)
        dirnames[:] = [d for d in dirnames if os.lstat(here / d).st_mode & 0o001]
    return found
