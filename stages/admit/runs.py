"""What a command or a check does to tasks' runs: kills, starts again, removals by a shrink and
releases of throttled tasks. Pure: each changes the rows it is given and returns the history
events to record; the caller writes the rows and sends the kills."""

from __future__ import annotations

from peloton.model.states import TASK_TERMINAL
from peloton.store import TaskEvent, TaskRow
from stages.admit.commands import REMOVED, to_start
from stages.admit.expand import next_run
from stages.admit.outbox import Outbox


def kill_runs(tasks: list[TaskRow], reason: str, message: str, now: int, box: Outbox) -> list[TaskEvent]:
    """The tasks' current runs go KILLING with the reason, each killed wherever it is (a kill in
    `box`): the TASK_KILLED that follows decides what comes next (by the reason)."""
    for t in tasks:
        t.state, t.reason, t.message, t.updated_ms = "KILLING", reason, message, now
        box.kill(t.job_id, t.instance, t.run_id, t.task_id, reason, message, now)
    return [TaskEvent(t.task_id, t.job_id, t.instance, t.run_id, "KILLING", reason, None, now, t.host_id, message)
            for t in tasks]


def start_runs(tasks: list[TaskRow], instances: list[int] | None, now: int) -> tuple[list[TaskRow], list[TaskEvent]]:
    """Stopped (KILLED) tasks run again, each as a new run in a gang of its own: the rows that
    changed and their events."""
    again = to_start(tasks, instances)
    for t in again:
        next_run(t, now)
        t.reason, t.message = "", ""
    return again, [TaskEvent(t.task_id, t.job_id, t.instance, t.run_id, "PENDING", "STARTED", None, now, "",
                             "started again") for t in again]


def removed_runs(tasks: list[TaskRow], count: int) -> list[TaskRow]:
    """A shrink's extra instances (count and up), highest first."""
    return sorted((t for t in tasks if t.instance >= count), key=lambda t: -t.instance)


def mark_removed(extra: list[TaskRow], why: str, now: int) -> tuple[list[TaskRow], list[TaskEvent]]:
    """Those of a shrink's extra instances that ended already end DELETED (not KILLED: each is no
    instance of the job any more, and counts for nothing in its state)."""
    ended = [t for t in extra if t.state in TASK_TERMINAL and t.state != "DELETED"]
    for t in ended:
        t.state, t.reason, t.message, t.updated_ms = "DELETED", REMOVED, why, now
    return ended, [TaskEvent(t.task_id, t.job_id, t.instance, t.run_id, "DELETED", REMOVED, None, now, t.host_id, why)
                   for t in ended]


def release_throttled(tasks: list[TaskRow], maximum: int, now: int) -> list[TaskRow]:
    """sla.maximumRunningInstances: tasks wait INITIALIZED until fewer than the maximum are
    scheduled (not ended), then go PENDING in instance order. The rows that went."""
    waiting = [t for t in tasks if t.state == "INITIALIZED"]
    live = sum(1 for t in tasks if t.state not in TASK_TERMINAL and t.state != "INITIALIZED")
    go = waiting[:max(0, maximum - live)]
    for t in go:
        t.state, t.updated_ms = "PENDING", now
    return go
