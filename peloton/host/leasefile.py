"""The agent's lease as its runs' executors hold it (executor.py): one file per agent, written in
place (never replaced, so that the descriptor each executor inherited keeps reading it), holding
the lease's end on time.monotonic() twice, "E E", so a read that met a write half done is told
apart. The agent's own directory holds it, closed to tasks: they get the descriptor, never the
path, and their commands not even that."""

from __future__ import annotations

import os
from pathlib import Path

WIDTH = 48  # every line the same length: a shorter write never leaves a longer one's tail


class LeaseFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self.until: float | None = None

    def write(self, until: float) -> None:
        """The lease now ends at `until` (time.monotonic()): what every executor reads at its end."""
        if until == self.until or self.fd < 0:
            return  # the same, or closed (the agent stopping: its last reports' answers come after)
        line = f"{until:.3f} {until:.3f}".ljust(WIDTH - 1) + "\n"
        os.pwrite(self.fd, line.encode(), 0)
        self.until = until

    def read(self) -> float | None:
        """What the file says (as an executor reads it), for the agent's own checks and tests."""
        parts = os.pread(self.fd, WIDTH, 0).split()
        return float(parts[0]) if len(parts) == 2 and parts[0] == parts[1] else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
