"""LocalDriver: runs each task as a real subprocess on this machine.

Each task gets a sandbox directory <sandbox_root>/<task_id>/ holding its stdout and stderr,
and its own process group (start_new_session=True) so that signals reach its children too.

Exit mapping (Mesos command-executor style):
  exit 0                              -> TASK_FINISHED, exit_code 0
  exit n != 0                         -> TASK_FAILED, exit_code n
  killed by a signal we did not send  -> TASK_FAILED, signal set, exit_code None (not 128+n:
                                         the process never produced an exit code)
  after kill()                        -> TASK_KILLED, signal = the signal that ended it (or
                                         the last one we sent if the command exited by itself)
  cannot be started                   -> TASK_FAILED, exit_code None, message = the OS error
When a task's main process ends, whatever is left in its process group is SIGKILLed, as
Mesos does when it destroys a task's container; that keeps background children from leaking.

No threads: poll() checks the few hundred local children with a non-blocking waitid each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .driver import (
    REASON_COMMAND_EXECUTOR_FAILED,
    TASK_FAILED,
    TASK_KILLED,
    TASK_RUNNING,
    TASK_STARTING,
    AgentDriver,
    LaunchRequest,
    TaskUpdate,
    exit_update,
    update_for,
)

_CLOSE_POLL_SECONDS = 0.01


@dataclass(slots=True, eq=False)
class _LocalTask:
    request: LaunchRequest
    proc: subprocess.Popen[bytes]
    kill_sent_at: float | None = None  # time.monotonic() of our SIGTERM
    kill_signal: int | None = None  # last signal we sent; None if we never killed it

    @property
    def pid(self) -> int:
        return self.proc.pid  # also the process group id (start_new_session)


class LocalDriver(AgentDriver):
    def __init__(self, sandbox_root: str | Path, close_timeout: float = 2.0) -> None:
        self._root = Path(sandbox_root)
        self._root.mkdir(parents=True, exist_ok=True)
        self._close_timeout = close_timeout
        self._tasks: dict[str, _LocalTask] = {}
        self._outbox: list[TaskUpdate] = []
        self._closed = False

    def sandbox(self, task_id: str) -> Path:
        """The task's sandbox directory; task ids must be plain names, not paths."""
        if task_id in ("", ".", "..") or "/" in task_id or "\0" in task_id:
            raise ValueError(f"task id {task_id!r} cannot name a sandbox directory")
        return self._root / task_id

    def launch(self, requests: Sequence[LaunchRequest]) -> None:
        if self._closed:
            raise RuntimeError("LocalDriver is closed")
        for request in requests:
            if request.task_id not in self._tasks:
                self._outbox.extend(self._start(request))

    def kill(self, task_ids: Sequence[str]) -> None:
        now = time.monotonic()
        for task_id in task_ids:
            task = self._tasks.get(task_id)
            # A task that already exited keeps its real outcome; poll() reports it.
            if task is None or task.kill_signal is not None or _exited(task.proc):
                continue
            _signal(task, signal.SIGTERM)
            task.kill_sent_at = now

    def poll(self) -> list[TaskUpdate]:
        updates, self._outbox = self._outbox, []
        updates.extend(self._step(time.monotonic()))
        return updates

    def active(self) -> set[str]:
        return set(self._tasks)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.kill(list(self._tasks))
        deadline = time.monotonic() + self._close_timeout
        while self._tasks and time.monotonic() < deadline:
            time.sleep(_CLOSE_POLL_SECONDS)
            self._outbox.extend(self._step(time.monotonic()))
        for task in list(self._tasks.values()):
            _signal(task, signal.SIGKILL)
            self._outbox.append(self._reap(task))

    def _start(self, request: LaunchRequest) -> list[TaskUpdate]:
        try:
            proc = self._spawn(request)
        except (OSError, ValueError) as exc:  # e.g. executable not found, bad task id
            return [
                update_for(
                    request,
                    TASK_FAILED,
                    reason=REASON_COMMAND_EXECUTOR_FAILED,
                    message=f"failed to start command: {exc}",
                )
            ]
        self._tasks[request.task_id] = _LocalTask(request, proc)
        return [update_for(request, TASK_STARTING), update_for(request, TASK_RUNNING)]

    def _spawn(self, request: LaunchRequest) -> subprocess.Popen[bytes]:
        sandbox = self.sandbox(request.task_id)
        sandbox.mkdir(parents=True, exist_ok=True)
        # Append so a relaunch under the same id keeps the earlier attempt's logs. The child
        # gets its own copies of the descriptors, so ours can be closed right away.
        with open(sandbox / "stdout", "ab") as out, open(sandbox / "stderr", "ab") as err:
            return subprocess.Popen(
                command_line(request),
                cwd=sandbox,
                env=task_environment(request),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    def _step(self, now: float) -> list[TaskUpdate]:
        """Reap tasks that exited and escalate kills whose grace period ran out."""
        updates = []
        for task in list(self._tasks.values()):
            if _exited(task.proc):
                updates.append(self._reap(task))
            elif _grace_expired(task, now):
                _signal(task, signal.SIGKILL)
        return updates

    def _reap(self, task: _LocalTask) -> TaskUpdate:
        # The main process is exited but not yet reaped (a zombie), so its pid, and thus
        # the group id, cannot have been reused: this SIGKILL only hits the task's leftovers.
        _signal_group(task.pid, signal.SIGKILL)
        returncode = task.proc.wait()
        del self._tasks[task.request.task_id]
        return _outcome(task, returncode)


def command_line(request: LaunchRequest) -> list[str]:
    if request.shell:
        return ["/bin/sh", "-c", request.command]
    return [request.command, *request.arguments]


def task_environment(request: LaunchRequest) -> dict[str, str]:
    env = dict(os.environ)
    env.update(request.environment)
    # Set last: the task's identity must not be overridable by the request.
    env["PELOTON_JOB_ID"] = request.job_id
    env["PELOTON_INSTANCE_ID"] = str(request.instance)
    env["PELOTON_TASK_ID"] = request.task_id
    return env


def _outcome(task: _LocalTask, returncode: int) -> TaskUpdate:
    request = task.request
    signum = -returncode if returncode < 0 else None
    if task.kill_signal is not None:
        ended_by = signum or task.kill_signal
        return update_for(
            request,
            TASK_KILLED,
            message=f"command killed by {_signal_name(ended_by)}",
            exit_code=returncode if returncode >= 0 else None,
            signal=ended_by,
        )
    if signum is not None:
        return update_for(
            request,
            TASK_FAILED,
            reason=REASON_COMMAND_EXECUTOR_FAILED,
            message=f"command terminated by signal {_signal_name(signum)}",
            signal=signum,
        )
    return exit_update(request, returncode)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """True once the process has ended, without reaping it (see _reap for why)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped by someone else; Popen.wait() copes with that
        return True


def _grace_expired(task: _LocalTask, now: float) -> bool:
    return (
        task.kill_sent_at is not None
        and task.kill_signal != signal.SIGKILL
        and now - task.kill_sent_at >= task.request.kill_grace_seconds
    )


def _signal(task: _LocalTask, signum: int) -> None:
    task.kill_signal = signum
    _signal_group(task.pid, signum)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)
