"""Job and task state vocabulary (Peloton's), and how the Mesos task states (mesos.py) report them."""

from __future__ import annotations

from peloton.model.mesos import MesosState

JOB_STATES = ("INITIALIZED", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "KILLED", "KILLING", "UNINITIALIZED",
              "DELETED")
JOB_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "KILLED", "DELETED"})
TASK_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "KILLED", "LOST", "DELETED"})
# The job commands that steer an update workflow (the others act on the job itself).
UPDATE_ACTIONS = ("PAUSE", "RESUME", "ABORT", "ROLLBACK")

# A run not launched yet: its demand is sent again when the broker lost what was in flight.
UNLAUNCHED = ("PENDING", "READY", "PLACING", "PLACED", "LAUNCHING")
# A run with no host yet. One that placement gave up on bounces back to PENDING (READY too, if it
# waits for admission again) and PLACING while it is tried again, keeping placement's reason
# until it is placed. A run admitted and placed at once goes from PENDING to LAUNCHING.
UNPLACED = ("PENDING", "READY", "PLACING")

# Order along a run's life: a status may only move a run forward (duplicates and late arrivals
# of earlier states are ignored). Terminal states share the top rank.
TASK_ORDER = {
    "INITIALIZED": 0, "PENDING": 1, "READY": 2, "PLACING": 3, "PLACED": 4, "LAUNCHING": 5,
    "LAUNCHED": 6, "STARTING": 7, "RUNNING": 8, "PREEMPTING": 9, "KILLING": 9,
    "SUCCEEDED": 10, "FAILED": 10, "KILLED": 10, "LOST": 10, "DELETED": 10,
}

# Where a step before launch (a TaskProgress record) leaves the run, where that is not the step
# itself: a host manager says LAUNCHING as it hands the run to its host's agent, so the run is
# launched then. Mesos' TASK_STAGING, the state of a task its master has handed on, is not sent
# besides (frameworks never receive it either). A run's history shows the step, then LAUNCHED.
PROGRESS_LANDS = {"LAUNCHING": "LAUNCHED"}

# Mesos task state -> Peloton task state (TASK_DROPPED: a host manager refused the placement).
MESOS_TO_TASK: dict[str, str] = {
    MesosState.TASK_STAGING: "LAUNCHED",
    MesosState.TASK_STARTING: "STARTING",
    MesosState.TASK_RUNNING: "RUNNING",
    MesosState.TASK_KILLING: "RUNNING",
    MesosState.TASK_FINISHED: "SUCCEEDED",
    MesosState.TASK_FAILED: "FAILED",
    MesosState.TASK_ERROR: "FAILED",
    MesosState.TASK_KILLED: "KILLED",
    MesosState.TASK_LOST: "LOST",
    MesosState.TASK_UNREACHABLE: "LOST",
    MesosState.TASK_GONE: "LOST",
    MesosState.TASK_GONE_BY_OPERATOR: "LOST",
    MesosState.TASK_DROPPED: "DROPPED",
}
