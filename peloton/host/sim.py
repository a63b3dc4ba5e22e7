"""SimDriver: simulated tasks that run for a while and then finish or fail.

Built for scale (100k active tasks): launch is O(batch) and poll is O(updates due), kept
that way by a heap of deadlines instead of scanning the active tasks on every poll.

Timeline of a task launched at clock time t with duration d:
  next poll         -> MesosState.TASK_STARTING, MesosState.TASK_RUNNING
  first poll >= t+d -> TASK_FINISHED (exit 0) or MesosState.TASK_FAILED (exit != 0)
A task with a health check runs HEALTHY at once (nothing is checked).
Both can land in the same poll (d == 0 does exactly that); the order is always kept.
A kill wins over a deadline that expires in the same poll.
Simulated tasks end with the driver, so there are never orphans to reap (the default
AgentDriver.reap_orphans does nothing).
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from peloton.model.health import HEALTHY
from peloton.model.mesos import MesosState, Reason

from .driver import AgentDriver, LaunchRequest, TaskUpdate, exit_update, now_ms, update_for

# Per-task overrides read from the request's environment (handy in tests).
SIM_SECONDS_ENV = "PELOTON_SIM_SECONDS"
SIM_EXIT_CODE_ENV = "PELOTON_SIM_EXIT_CODE"

# Rebuild the heap once stale (killed) entries outnumber live ones by this much, so
# killing tasks with long deadlines cannot grow it without bound.
_HEAP_SLACK = 1024


@dataclass(slots=True, eq=False)
class _SimTask:
    request: LaunchRequest
    exit_code: int


class SimDriver(AgentDriver):
    def __init__(
        self,
        task_seconds: float = 1.0,
        failure_rate: float = 0.0,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not task_seconds >= 0:
            raise ValueError(f"task_seconds must be >= 0, got {task_seconds!r}")
        if not 0.0 <= failure_rate <= 1.0:
            raise ValueError(f"failure_rate must be in [0, 1], got {failure_rate!r}")
        self._task_seconds = float(task_seconds)
        self._failure_rate = failure_rate
        self._rng = random.Random(seed)
        self._clock = clock
        self._tasks: dict[str, _SimTask] = {}
        # (deadline, tie-breaker, task); the counter keeps tasks from ever being compared.
        self._deadlines: list[tuple[float, int, _SimTask]] = []
        self._seq = itertools.count()
        self._kills: dict[str, _SimTask] = {}  # insertion-ordered: kill order is report order
        self._outbox: list[TaskUpdate] = []
        self._closed = False

    def launch(self, requests: Sequence[LaunchRequest]) -> None:
        if self._closed:
            raise RuntimeError("SimDriver is closed")
        now, stamp = self._clock(), now_ms()  # one clock read per batch keeps launch cheap
        for request in requests:
            if request.task_id not in self._tasks:
                self._start(request, now, stamp)

    def kill(self, task_ids: Sequence[str]) -> None:
        for task_id in task_ids:
            task = self._tasks.get(task_id)
            if task is not None:
                self._kills.setdefault(task_id, task)

    def poll(self) -> list[TaskUpdate]:
        updates, self._outbox = self._outbox, []
        updates.extend(self._apply_kills())
        updates.extend(self._expire(self._clock()))
        return updates

    def active(self) -> set[str]:
        return set(self._tasks)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in self._tasks.values():
            self._outbox.append(_killed(task.request))
        self._tasks.clear()
        self._kills.clear()
        self._deadlines.clear()

    def _start(self, request: LaunchRequest, now: float, stamp: int) -> None:
        try:
            seconds, exit_code = self._plan(request)
        except ValueError as exc:
            # Like a command that cannot be executed: fails at once, never becomes active.
            self._outbox.append(
                update_for(request, MesosState.TASK_FAILED, reason=Reason.CONTAINER_LAUNCH_FAILED, message=str(exc))
            )
            return
        task = _SimTask(request, exit_code)
        self._tasks[request.task_id] = task
        self._outbox.append(TaskUpdate(request.task_id, request.host_id, MesosState.TASK_STARTING, stamp))
        # A simulated task with a health check is healthy from the start: there is nothing to check.
        self._outbox.append(TaskUpdate(request.task_id, request.host_id, MesosState.TASK_RUNNING, stamp,
                                       health=HEALTHY if request.health_check else ""))
        heapq.heappush(self._deadlines, (now + seconds, next(self._seq), task))

    def _plan(self, request: LaunchRequest) -> tuple[float, int]:
        """How long the task runs and how it exits: environment overrides, else the defaults."""
        env = dict(request.environment)
        seconds = self._task_seconds
        if SIM_SECONDS_ENV in env:
            seconds = _parse(env[SIM_SECONDS_ENV], float, SIM_SECONDS_ENV)
            if not seconds >= 0:  # also rejects NaN, which would corrupt the heap order
                raise ValueError(f"invalid {SIM_SECONDS_ENV} {env[SIM_SECONDS_ENV]!r}: must be >= 0")
        if SIM_EXIT_CODE_ENV in env:
            exit_code = _parse(env[SIM_EXIT_CODE_ENV], int, SIM_EXIT_CODE_ENV)
        else:
            exit_code = 1 if self._rng.random() < self._failure_rate else 0
        return seconds, exit_code

    def _apply_kills(self) -> list[TaskUpdate]:
        updates = []
        for task_id, task in self._kills.items():
            if self._tasks.get(task_id) is task:
                del self._tasks[task_id]
                updates.append(_killed(task.request))
        self._kills.clear()
        self._compact_deadlines()
        return updates

    def _expire(self, now: float) -> list[TaskUpdate]:
        updates = []
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            task = heapq.heappop(heap)[2]
            if self._tasks.get(task.request.task_id) is not task:
                continue  # killed earlier; its heap entry was left behind
            del self._tasks[task.request.task_id]
            updates.append(exit_update(task.request, task.exit_code))
        return updates

    def _compact_deadlines(self) -> None:
        if len(self._deadlines) > 2 * len(self._tasks) + _HEAP_SLACK:
            live = self._tasks
            self._deadlines = [e for e in self._deadlines if live.get(e[2].request.task_id) is e[2]]
            heapq.heapify(self._deadlines)


def _killed(request: LaunchRequest) -> TaskUpdate:
    return update_for(request, MesosState.TASK_KILLED, message="task killed")


def _parse(raw: str, kind: type, name: str) -> Any:
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"invalid {name} {raw!r}") from None
