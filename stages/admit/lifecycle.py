"""Task and job state machines of the job manager. Pure functions, no Kafka, no store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from peloton.model.events import task_id_of
from peloton.model.mesos import PREEMPTED, MesosState, Reason
from peloton.model.states import JOB_TERMINAL, MESOS_TO_TASK, PROGRESS_LANDS, TASK_ORDER, TASK_TERMINAL

# A run whose process could not start (Reason.CONTAINER_LAUNCH_FAILED) is a system failure in
# Peloton's words: the task gets at least this many runs, whatever its maxFailures.
SYSTEM_FAILURE_RUNS = 4


@dataclass(frozen=True, slots=True)
class Transition:
    """What a status event does to the current run of a task."""

    state: str  # the new Peloton task state
    retry: bool = False  # start a new run (PENDING) after this one
    requeue: bool = False  # ask for the same run again (its placement was refused)
    count_failure: bool = False
    release: bool = False  # the run's pool allocation is given back


# A move and nothing more, one per state: made once (frozen, so shared), not per status.
_MOVES = {state: Transition(state) for state in TASK_ORDER}
_MADE: dict[tuple, Transition] = {}  # every other transition, made once too (a frozen init is dear)


def _transition(state: str, retry: bool = False, requeue: bool = False, count_failure: bool = False,
                release: bool = False) -> Transition:
    key = (state, retry, requeue, count_failure, release)
    made = _MADE.get(key)
    if made is None:
        made = _MADE[key] = Transition(state, retry, requeue, count_failure, release)
    return made


def status_problem(task_known: bool, event: dict, id_made: bool = False) -> str | None:
    """Why a TaskStatus record cannot be about any task of ours, or None. (A status for an older
    run of a known task is not a problem: task_transition ignores it.) `id_made`: its task id was
    made from its job id, instance and run here, not sent (a run of a TaskStatusRuns)."""
    if not task_known:
        return (f"status for unknown task {event['task_id']!r} (no instance {event['instance']} of job "
                f"{event['job_id']!r})")
    if not id_made and event["task_id"] != task_id_of(event["job_id"], event["instance"], event["run_id"]):
        return (f"task id {event['task_id']!r} is not that of job {event['job_id']!r}, instance "
                f"{event['instance']}, run {event['run_id']}")
    if event["state"] not in MESOS_TO_TASK:
        return f"status {event['state']} says nothing about the task"
    return None


HOST_MAINTENANCE = "HOST_MAINTENANCE"  # the reason of a host manager's kill that drains a host
RESTARTED = "RESTARTED"  # the reason of a kill that replaces a run (job restart, job update)
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"  # killed for running longer than sla.maxRunningTime (ends KILLED)
LAUNCH_TIMEOUT = "LAUNCH_TIMEOUT"  # killed for not reaching RUNNING within the launch timeout
STOPPED = "STOPPED"  # the reason of a kill a user asked for


def service_backoff_s(failures: int, base_s: float = 30.0) -> float:
    """Peloton's restart backoff of a SERVICE task: min(base * 2^(n-1), 60 min) after n exits."""
    return min(base_s * 2 ** max(failures - 1, 0), 3600.0)


def task_transition(
    current_state: str, current_run: int, event_run: int, mesos_state: str, failures: int, max_failures: int,
    reason: str = "", service: bool = False,
) -> Transition | None:
    """The effect of one status event, or None when it must be ignored.

    Ignored: events of another run (older runs are orphans), unknown states, repeats and
    out-of-order events (moves are monotonic by state order), anything after a terminal state.

    Retries (`failures` counts the earlier failed runs):
      FAILED      counted; rerun while failures + 1 < max_failures (maxFailures 4: at most 4
                  runs), or < max(max_failures, SYSTEM_FAILURE_RUNS) when its process could not
                  start (Reason.CONTAINER_LAUNCH_FAILED: Peloton's system failure)
      LOST        (the host, its agent or the launch went away) never counted, as in Peloton: the
                  task did nothing wrong; rerun, unless a stop came first (reason STOPPED)
      TASK_ERROR  (Mesos: the task description is invalid) FAILED at once, never rerun: the
                  same description would fail again
    Preemption (reason PREEMPTED): TASK_KILLING makes the run PREEMPTING; its TASK_KILLED
    reruns the task and counts no failure (the task did nothing wrong). So does a kill that
    drains a host for maintenance (reason HOST_MAINTENANCE).
    SERVICE tasks (`service`) run until stopped: a run that ends in any way but a stop or an
    invalid description reruns, each exit counted (the restart backoff grows with the count).
    """
    if event_run != current_run:
        return None
    new = MESOS_TO_TASK.get(mesos_state)
    if new is None or current_state in TASK_TERMINAL:
        return None
    if new == "DROPPED":
        # A host manager refused the placement (the host no longer had room): the same run goes
        # back to its pool's queue. Once the run is launched a refusal is stale (a duplicate
        # placement refused elsewhere) and changes nothing.
        if TASK_ORDER[current_state] >= TASK_ORDER["LAUNCHED"]:
            return None
        return _transition("PENDING", requeue=True, release=True)
    if reason == PREEMPTED and mesos_state == MesosState.TASK_KILLING:
        new = "PREEMPTING"
    if TASK_ORDER[new] <= TASK_ORDER[current_state]:
        return None
    if reason == PREEMPTED and new == "KILLED" and current_state != "KILLING":  # a stop wins
        return _transition("KILLED", retry=True, release=True)
    # A drain's kill: the job manager's own (the run was KILLING for it) or, from an older host
    # manager, the host's. The caller passes STOPPED instead where a stop came first.
    if reason == HOST_MAINTENANCE and new == "KILLED":
        return _transition("KILLED", retry=True, release=True)
    if reason == RESTARTED and new == "KILLED":  # replaced by a restart or an update
        return _transition("KILLED", retry=True, release=True)
    if reason == DEADLINE_EXCEEDED and new == "KILLED":  # Peloton's deadline: KILLED, for good
        return _transition("KILLED", release=True)
    if reason == LAUNCH_TIMEOUT and new == "KILLED":  # the system's fault: rerun as a lost run
        new = "LOST"
    if mesos_state == MesosState.TASK_ERROR:
        return _transition("FAILED", count_failure=True, release=True)
    if new == "LOST":
        return _transition("LOST", retry=reason != STOPPED, release=True)
    if service and new in ("SUCCEEDED", "FAILED"):
        return _transition(new, retry=True, count_failure=True, release=True)
    # Rerun until the failure count reaches maxFailures: maxFailures 4 means at most 4 runs.
    limit = max(max_failures, SYSTEM_FAILURE_RUNS) if reason == Reason.CONTAINER_LAUNCH_FAILED else max_failures
    if new == "FAILED" and failures + 1 < limit:
        return _transition("FAILED", retry=True, count_failure=True, release=True)
    if new in TASK_TERMINAL:
        return _transition(new, count_failure=new == "FAILED", release=True)
    return _MOVES[new]


def progress_transition(current_state: str, current_run: int, event_run: int, state: str) -> Transition | None:
    """The effect of a step before launch (READY, PLACING, PLACED, LAUNCHING) on the current run:
    forward only, like a status. Stages report these steps in order, but from different
    producers: a step that arrives after a later one (or after the run ended) is ignored.
    LAUNCHING moves the run to LAUNCHED (PROGRESS_LANDS)."""
    if event_run != current_run or current_state in TASK_TERMINAL or state not in TASK_ORDER:
        return None
    state = PROGRESS_LANDS.get(state, state)
    if TASK_ORDER[state] <= TASK_ORDER[current_state]:
        return None
    return _MOVES[state]


def job_state(counts: Mapping[str, int], instance_count: int, current: str, controller: str | None = None) -> str:
    """Job state from its tasks' state counts, Peloton's rules in order. `controller`: the state
    of the job's controller task, if it has one: once the job is terminal, it alone decides."""
    if current in JOB_TERMINAL:
        return current
    state = _job_state(counts, instance_count, current)
    if controller is not None and state in JOB_TERMINAL:
        return {"SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED", "LOST": "FAILED"}.get(controller, "KILLED")
    return state


def _job_state(counts: Mapping[str, int], instance_count: int, current: str) -> str:
    succeeded = counts.get("SUCCEEDED", 0)
    failed = counts.get("FAILED", 0)
    lost = counts.get("LOST", 0)
    killed = counts.get("KILLED", 0)
    if succeeded >= instance_count:
        return "SUCCEEDED"
    if succeeded + failed + lost >= instance_count:
        return "FAILED"
    if killed > 0 and succeeded + failed + killed + lost >= instance_count:
        return "KILLED"
    if current == "KILLING":
        return "KILLING"
    if counts.get("RUNNING", 0) > 0:
        return "RUNNING"
    return "PENDING"
