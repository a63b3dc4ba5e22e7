"""How a run's processes start: its command line, and the executor (executor.py) that leads its
process group, whose program travels in its environment."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .driver import LaunchRequest


def command_line(request: LaunchRequest) -> list[str]:
    if request.shell:
        return ["/bin/sh", "-c", request.command]
    return [request.command, *request.arguments]


def _executor_interpreter() -> str:
    """A Python every task account can run: the system's (this process's own may live under a
    home only root can enter), else this one's."""
    return shutil.which("python3", path="/usr/bin:/bin:/usr/local/bin") or os.path.realpath(sys.executable)


# What the executor itself holds of its run's cgroup: its private memory is under 3 MB (the
# interpreter's code is shared, page cache), and it is one process.
EXECUTOR_MEM_MB = 4


# The executor's program travels in its environment (which it takes out before starting the
# command), so that `ps` shows a line, not the program.
EXECUTOR_ENVIRONMENT = {"PELOTON_EXECUTOR": (Path(__file__).parent / "executor.py").read_text()}


_EXECUTOR = [_executor_interpreter(), "-I", "-S", "-c", 'import os; exec(os.environ.pop("PELOTON_EXECUTOR"))']


def executor_argv() -> list[str]:
    """What starts a command under its executor (executor.py), given EXECUTOR_ENVIRONMENT too, in
    its sandbox."""
    return list(_EXECUTOR)


def missing_command(command: str, path: str | None) -> bool:
    """A command named bare that is not on PATH, or by an absolute path that is not there."""
    if "/" not in command:
        return shutil.which(command, path=path) is None
    return command.startswith("/") and not os.path.exists(command)


# The gate an isolated task starts behind: its shell waits for 'go' on stdin (the agent writes it
# once the shell is in the task's cgroup), then becomes the command, with stdin from /dev/null.
GATE = ["/bin/sh", "-c", 'read -r go && [ "$go" = go ] && exec "$@" </dev/null; exit 125', "peloton-gate"]

