"""Job and task state vocabulary (Peloton's), and the Mesos task states that report them."""

from __future__ import annotations

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
MESOS_TO_TASK = {
    "TASK_STAGING": "LAUNCHED",
    "TASK_STARTING": "STARTING",
    "TASK_RUNNING": "RUNNING",
    "TASK_KILLING": "RUNNING",
    "TASK_FINISHED": "SUCCEEDED",
    "TASK_FAILED": "FAILED",
    "TASK_ERROR": "FAILED",
    "TASK_KILLED": "KILLED",
    "TASK_LOST": "LOST",
    "TASK_UNREACHABLE": "LOST",
    "TASK_GONE": "LOST",
    "TASK_GONE_BY_OPERATOR": "LOST",
    "TASK_DROPPED": "DROPPED",
}

MESOS_TERMINAL = frozenset(
    {"TASK_FINISHED", "TASK_FAILED", "TASK_ERROR", "TASK_KILLED", "TASK_LOST", "TASK_DROPPED",
     "TASK_UNREACHABLE", "TASK_GONE", "TASK_GONE_BY_OPERATOR"}
)

# A run's end reported after the host manager had given the run up (it was LOST, or unknown): its
# agent killed it when its lease ran out (fencing), or the host manager killed a stale copy when
# the agent reported again (reconciliation). Recorded in the run's history, nothing else.
REASON_AGENT_FENCED = "REASON_AGENT_FENCED"
# Mesos' reason when a task's process could not be started at all (not found, not executable): a
# launch failure, which Peloton retries at least four times whatever the job's maxFailures.
REASON_CONTAINER_LAUNCH_FAILED = "REASON_CONTAINER_LAUNCH_FAILED"
# Mesos' reason when the kernel killed a task for going over its memory limit (its cgroup's OOM).
REASON_CONTAINER_LIMITATION_MEMORY = "REASON_CONTAINER_LIMITATION_MEMORY"
# ... and when its agent killed it for a sandbox grown past its disk limit.
REASON_CONTAINER_LIMITATION_DISK = "REASON_CONTAINER_LIMITATION_DISK"
REASON_RECONCILIATION = "REASON_RECONCILIATION"
LATE_END_REASONS = frozenset({REASON_AGENT_FENCED, REASON_RECONCILIATION})
