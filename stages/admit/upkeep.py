"""What the job manager looks for on its own, between batches: runs past a deadline, runs to move
off hosts in maintenance, jobs past their retention, and the counts it reports. Pure: the stage
reads the rows, asks these, and kills, deletes or reports."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from peloton.model.states import TASK_ORDER
from peloton.store import TaskRow
from stages.admit.drain import DrainPlan
from stages.admit.lifecycle import DEADLINE_EXCEEDED, LAUNCH_TIMEOUT

DRAIN_CHECK_S = 1.0  # how often the job manager looks for runs to move off hosts in maintenance
CLAIM_SWEEP_S = 3600.0  # how often it forgets commands and deleted job ids past store.CLAIMS_KEPT_MS
# How often it looks for jobs that ended longer ago than settings.job_retention_s (a quarter of
# that when shorter, down to a second), and how many of them one tick deletes, each with its
# tasks and events: through a backlog the loop polls on.
EXPIRY_CHECK_S = 60.0
EXPIRED_PER_TICK = 20
KILLS_RESENT_MAX = 100_000  # KILLING runs killed again at a takeover (the oldest first)


def expiry_period_s(retention_s: float) -> float:
    return min(EXPIRY_CHECK_S, max(1.0, retention_s / 4))


def ran_too_long(tasks: Iterable[TaskRow], limit_s: int, now: int) -> list[TaskRow]:
    """The RUNNING runs of a job past its sla.maxRunningTime (`limit_s`)."""
    return [t for t in tasks if t.state == "RUNNING" and t.updated_ms < now - limit_s * 1000]


def deadline_kills(late: list[TaskRow], over: list[TaskRow],
                   launch_timeout_s: float) -> list[tuple[list[TaskRow], str, str]]:
    """(runs, reason, why) of each deadline that has runs to kill: runs never RUNNING within the
    launch timeout run again, as lost runs do; runs beyond sla.maxRunningTime fail."""
    kinds = ((late, LAUNCH_TIMEOUT, f"not running {launch_timeout_s:g}s after its launch"),
             (over, DEADLINE_EXCEEDED, "ran longer than its job's sla.maxRunningTime"))
    return [(tasks, reason, why) for tasks, reason, why in kinds if tasks]


def drain_kills(plans: Iterable[DrainPlan]) -> dict[str, list[TaskRow]]:
    """The runs the jobs' drain plans move now, by host."""
    kills: dict[str, list[TaskRow]] = {}
    for plan in plans:
        for t in plan.kill:
            kills.setdefault(t.host_id, []).append(t)
    return kills


def task_totals(counts: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """The tasks of some jobs by state, every state named (peloton_tasks)."""
    totals: dict[str, int] = dict.fromkeys(TASK_ORDER, 0)
    for of_job in counts.values():
        for state, n in of_job.items():
            totals[state] = totals.get(state, 0) + n
    return totals
