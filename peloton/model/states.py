"""Job and task state vocabulary (Peloton's), and how the Mesos task states (mesos.py) report them.
Members are strings (StrEnum): the stores, records and JSON carry Peloton's words, and a state
read back compares equal to its member."""

from __future__ import annotations

from enum import StrEnum

from peloton.model.mesos import MesosState


class JobState(StrEnum):
    INITIALIZED = "INITIALIZED"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    KILLING = "KILLING"
    UNINITIALIZED = "UNINITIALIZED"
    DELETED = "DELETED"


class TaskState(StrEnum):
    """A run's state along its life, in Peloton's words (the order is TASK_ORDER's)."""

    INITIALIZED = "INITIALIZED"  # held back by the job's maximumRunningInstances
    PENDING = "PENDING"
    READY = "READY"  # admitted after waiting for its pool's entitlement
    PLACING = "PLACING"
    PLACED = "PLACED"
    LAUNCHING = "LAUNCHING"
    LAUNCHED = "LAUNCHED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    PREEMPTING = "PREEMPTING"
    KILLING = "KILLING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    LOST = "LOST"
    DROPPED = "DROPPED"  # a host manager refused its placement (a Mesos TASK_DROPPED)
    DELETED = "DELETED"  # an instance a shrink removed


JOB_STATES = tuple(JobState)
JOB_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED, JobState.DELETED})
TASK_TERMINAL = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST,
                           TaskState.DELETED})
# The job commands that steer an update workflow (the others act on the job itself).
UPDATE_ACTIONS = ("PAUSE", "RESUME", "ABORT", "ROLLBACK")

# A run not launched yet: its demand is sent again when the broker lost what was in flight.
UNLAUNCHED = (TaskState.PENDING, TaskState.READY, TaskState.PLACING, TaskState.PLACED, TaskState.LAUNCHING)
# A run with no host yet. One that placement gave up on bounces back to PENDING (READY too, if it
# waits for admission again) and PLACING while it is tried again, keeping placement's reason
# until it is placed. A run admitted and placed at once goes from PENDING to LAUNCHING.
UNPLACED = (TaskState.PENDING, TaskState.READY, TaskState.PLACING)

# Order along a run's life: a status may only move a run forward (duplicates and late arrivals
# of earlier states are ignored). Terminal states share the top rank.
TASK_ORDER: dict[str, int] = {
    TaskState.INITIALIZED: 0, TaskState.PENDING: 1, TaskState.READY: 2, TaskState.PLACING: 3, TaskState.PLACED: 4,
    TaskState.LAUNCHING: 5, TaskState.LAUNCHED: 6, TaskState.STARTING: 7, TaskState.RUNNING: 8,
    TaskState.PREEMPTING: 9, TaskState.KILLING: 9,
    TaskState.SUCCEEDED: 10, TaskState.FAILED: 10, TaskState.KILLED: 10, TaskState.LOST: 10, TaskState.DELETED: 10,
}

# Where a step before launch (a TaskProgress record) leaves the run, where that is not the step
# itself: a host manager says LAUNCHING as it hands the run to its host's agent, so the run is
# launched then. Mesos' TASK_STAGING, the state of a task its master has handed on, is not sent
# besides (frameworks never receive it either). A run's history shows the step, then LAUNCHED.
PROGRESS_LANDS: dict[str, str] = {TaskState.LAUNCHING: TaskState.LAUNCHED}

# Mesos task state -> Peloton task state (TASK_DROPPED: a host manager refused the placement).
MESOS_TO_TASK: dict[str, str] = {
    MesosState.TASK_STAGING: TaskState.LAUNCHED,
    MesosState.TASK_STARTING: TaskState.STARTING,
    MesosState.TASK_RUNNING: TaskState.RUNNING,
    MesosState.TASK_KILLING: TaskState.RUNNING,
    MesosState.TASK_FINISHED: TaskState.SUCCEEDED,
    MesosState.TASK_FAILED: TaskState.FAILED,
    MesosState.TASK_ERROR: TaskState.FAILED,
    MesosState.TASK_KILLED: TaskState.KILLED,
    MesosState.TASK_LOST: TaskState.LOST,
    MesosState.TASK_UNREACHABLE: TaskState.LOST,
    MesosState.TASK_GONE: TaskState.LOST,
    MesosState.TASK_GONE_BY_OPERATOR: TaskState.LOST,
    MesosState.TASK_DROPPED: TaskState.DROPPED,
}
