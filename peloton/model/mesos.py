"""The Mesos words a host reports a run in: its task states and the reasons that go with them,
defined once. Members are strings (StrEnum), so records, JSON and the store carry them as the
names Mesos and Peloton use, and a state read back from a record compares equal to its member."""

from __future__ import annotations

from enum import StrEnum


class MesosState(StrEnum):
    """A run's state as its host reports it (mesos.v1.TaskState)."""

    TASK_STAGING = "TASK_STAGING"  # handed to its host (never sent here: LAUNCHING says it)
    TASK_STARTING = "TASK_STARTING"
    TASK_RUNNING = "TASK_RUNNING"
    TASK_KILLING = "TASK_KILLING"
    TASK_FINISHED = "TASK_FINISHED"
    TASK_FAILED = "TASK_FAILED"
    TASK_KILLED = "TASK_KILLED"
    TASK_ERROR = "TASK_ERROR"  # a task description that cannot run
    TASK_LOST = "TASK_LOST"
    TASK_DROPPED = "TASK_DROPPED"  # a host manager refused the placement
    TASK_UNREACHABLE = "TASK_UNREACHABLE"
    TASK_GONE = "TASK_GONE"
    TASK_GONE_BY_OPERATOR = "TASK_GONE_BY_OPERATOR"


MESOS_TERMINAL = frozenset({
    MesosState.TASK_FINISHED, MesosState.TASK_FAILED, MesosState.TASK_ERROR, MesosState.TASK_KILLED,
    MesosState.TASK_LOST, MesosState.TASK_DROPPED, MesosState.TASK_UNREACHABLE, MesosState.TASK_GONE,
    MesosState.TASK_GONE_BY_OPERATOR,
})


class Reason(StrEnum):
    """Why a run is in its state (mesos.v1.TaskStatus.Reason, and the scheduler's own)."""

    # The command could not start, or exited unsuccessfully.
    COMMAND_EXECUTOR_FAILED = "REASON_COMMAND_EXECUTOR_FAILED"
    # Its process could not be started at all (not found, not executable): a launch failure,
    # which Peloton retries at least four times whatever the job's maxFailures.
    CONTAINER_LAUNCH_FAILED = "REASON_CONTAINER_LAUNCH_FAILED"
    # The kernel killed it for going over its memory limit (its cgroup's OOM).
    CONTAINER_LIMITATION_MEMORY = "REASON_CONTAINER_LIMITATION_MEMORY"
    # Its agent killed it for a sandbox grown past its disk limit.
    CONTAINER_LIMITATION_DISK = "REASON_CONTAINER_LIMITATION_DISK"
    # A TASK_RUNNING sent again because a health check changed the run's health.
    HEALTH_CHECK_STATUS_UPDATED = "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
    # Killed by its agent after its health check failed maxConsecutiveFailures times in a row.
    TASK_UNHEALTHY = "REASON_TASK_UNHEALTHY"
    # A task description that cannot run (a gang a stage refused).
    TASK_INVALID = "REASON_TASK_INVALID"
    # Placement gave up a cycle: no host could take the gang (the message says why).
    NO_HOST = "REASON_NO_HOST"
    # A host manager refused the placement (its host closed, or no room left on it).
    PLACEMENT_REFUSED = "REASON_PLACEMENT_REFUSED"
    # Killed by its agent when the agent's lease ran out (fencing).
    AGENT_FENCED = "REASON_AGENT_FENCED"
    # A stale copy killed when its agent reported again.
    RECONCILIATION = "REASON_RECONCILIATION"
    # Its agent went silent, or its host manager instance went away.
    AGENT_DISCONNECTED = "REASON_AGENT_DISCONNECTED"
    # It ended while its agent was away, and left no word of how.
    AGENT_RESTARTED = "REASON_AGENT_RESTARTED"
    # Its agent was stopped.
    AGENT_SHUTDOWN = "REASON_AGENT_SHUTDOWN"


# The reason a preempted run's statuses and kill carry: its resource pool's manager wanted its room
# for another's, or its host's non-revocable runs wanted their slack back. Its job runs it again.
PREEMPTED = "PREEMPTED"

# A run's end reported after the host manager had given the run up (it was LOST, or unknown):
# recorded in the run's history, nothing else.
LATE_END_REASONS = frozenset({Reason.AGENT_FENCED, Reason.RECONCILIATION})
