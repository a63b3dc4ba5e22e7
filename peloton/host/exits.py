"""How a run's end reads as a Mesos task state (Mesos' command executor's mapping):
  exit 0                              -> MesosState.TASK_FINISHED, exit_code 0
  exit n != 0                         -> MesosState.TASK_FAILED, exit_code n
  killed by a signal we did not send  -> MesosState.TASK_FAILED, signal set, exit_code None (not 128+n:
                                         the process never produced an exit code)
  after a kill                        -> MesosState.TASK_KILLED, signal = the signal that ended it (or
                                         the last one sent if the command exited by itself)
  cannot be started                   -> MesosState.TASK_FAILED, exit_code None, message = the OS error
and, where the run's cgroup counted them, what it used; and how a run no driver waited for ended,
as its executor wrote it in its sandbox."""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from peloton.model.mesos import MesosState, Reason

from .cgroups import Usage
from .driver import LaunchRequest, TaskUpdate, exit_update, now_ms, update_for
from .executor import FENCED, STATUS_FILE
from .plainfiles import read_plain


class EndedRun(Protocol):
    """What a run's end is read with: its request and what its driver did to it."""

    request: LaunchRequest
    kill_signal: int | None  # the last signal its driver sent; None if it never killed it
    unhealthy: str  # why its driver killed it for its health check
    over: str  # the limit its driver killed it for (disk)


def read_status(sandbox: Path) -> tuple[str, str] | None:
    """How the executor in `sandbox` saw its command end: ("exit", code), ("signal", number),
    ("error", why it did not start) or ("fenced", "") when it killed the run itself, the lease
    having run out with no agent holding it; None when it wrote nothing readable. The sandbox is the
    task's: a task can only garble its own ending there, and what it leaves under the name (a
    link to a file of root's, a pipe that would hold the agent) is not read."""
    text = read_plain(sandbox / STATUS_FILE)
    if text is None:
        return None
    kind, _, value = text.strip().partition(" ")
    if kind == FENCED and not value:
        return kind, value
    if kind == "error" and value:
        return kind, value
    if kind in ("exit", "signal") and value.isdigit() and len(value) <= 3:
        return kind, value
    return None


def orphan_update(task_id: str, host_id: str, status: tuple[str, str], usage: Usage | None) -> TaskUpdate:
    """The terminal update of a run whose executor wrote `status` while no driver of ours waited
    for it: as _ending() maps a run's end, less what only its driver knew (a kill it sent)."""
    kind, value = status
    at = now_ms()
    if kind == FENCED:
        return TaskUpdate(task_id, host_id, MesosState.TASK_LOST, at, Reason.AGENT_FENCED,
                          "killed by its executor: its agent's lease ran out while no agent held the run")
    if kind == "error":
        return TaskUpdate(task_id, host_id, MesosState.TASK_FAILED, at, Reason.CONTAINER_LAUNCH_FAILED,
                          f"failed to start command: {value}")
    signum = int(value) if kind == "signal" else None
    code = int(value) if kind == "exit" else None
    if usage is not None and usage.oom_killed:
        update = TaskUpdate(task_id, host_id, MesosState.TASK_FAILED, at, Reason.CONTAINER_LIMITATION_MEMORY,
                            "memory limit exceeded: killed by the kernel", exit_code=code, signal=signum)
    elif signum is not None:
        update = TaskUpdate(task_id, host_id, MesosState.TASK_FAILED, at, Reason.COMMAND_EXECUTOR_FAILED,
                            f"command terminated by signal {signal_name(signum)}", signal=signum)
    elif code == 0:
        update = TaskUpdate(task_id, host_id, MesosState.TASK_FINISHED, at, exit_code=0)
    else:
        update = TaskUpdate(task_id, host_id, MesosState.TASK_FAILED, at, Reason.COMMAND_EXECUTOR_FAILED,
                            f"command exited with code {code}", exit_code=code)
    return _with_usage(update, usage)


def outcome(task: EndedRun, returncode: int, usage: Usage | None = None) -> TaskUpdate:
    return _with_usage(_ending(task, returncode, usage), usage)


def _with_usage(update: TaskUpdate, usage: Usage | None) -> TaskUpdate:
    """A run's last update with what its cgroup counted it used, in its message too."""
    if usage is None:
        return update
    said = usage.describe()
    return replace(update, message=f"{update.message}; {said}" if update.message else said,
                   cpu_seconds=usage.cpu_seconds, peak_mem_mb=usage.peak_mem_mb)


def _ending(task: EndedRun, returncode: int, usage: Usage | None) -> TaskUpdate:
    request = task.request
    signum = -returncode if returncode < 0 else None
    if task.over:
        return update_for(request, MesosState.TASK_FAILED, reason=Reason.CONTAINER_LIMITATION_DISK,
                          message=f"killed: {task.over}", signal=signum)
    if usage is not None and usage.oom_killed and task.kill_signal is None:
        return update_for(request, MesosState.TASK_FAILED, reason=Reason.CONTAINER_LIMITATION_MEMORY,
                          message=f"memory limit of {request.resources.mem_mb:g} MB exceeded: killed by the kernel",
                          exit_code=returncode if returncode >= 0 else None, signal=signum)
    if task.unhealthy:
        return update_for(request, MesosState.TASK_FAILED, reason=Reason.TASK_UNHEALTHY,
                          message=f"killed: {task.unhealthy}", exit_code=returncode if returncode >= 0 else None,
                          signal=signum or task.kill_signal)
    if task.kill_signal is not None:
        ended_by = signum or task.kill_signal
        return update_for(
            request,
            MesosState.TASK_KILLED,
            message=f"command killed by {signal_name(ended_by)}",
            exit_code=returncode if returncode >= 0 else None,
            signal=ended_by,
        )
    if signum is not None:
        return update_for(
            request,
            MesosState.TASK_FAILED,
            reason=Reason.COMMAND_EXECUTOR_FAILED,
            message=f"command terminated by signal {signal_name(signum)}",
            signal=signum,
        )
    return exit_update(request, returncode)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)

