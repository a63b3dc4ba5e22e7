"""Drains under a disruption budget: the runs on a host in maintenance (DRAINING) must move, and a
job's `sla.maximumUnavailableInstances` bounds how many of its instances may be down at once, as
Peloton's SLA-aware maintenance does. The job manager asks this for each job with runs on a
draining host, whenever it looks (and again as moved instances come back RUNNING elsewhere).
Pure: no Kafka, no store.

An instance is down when it should run and does not serve: any state but RUNNING that has not
ended (pending, placed, launching, being killed), or RUNNING with a health check that has not
said HEALTHY. A run that is on a draining host and down already moves at once, as moving it costs
nothing; a serving one moves only while the job has room."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from peloton.model.health import serving
from peloton.model.states import TASK_TERMINAL
from peloton.store import TaskRow

# The states of a run that holds its host (the runs a drain must move).
ON_HOST = ("LAUNCHING", "LAUNCHED", "STARTING", "RUNNING")
# What a waiting run's message starts with, so the next look can clear it.
WAITING = "drain of host "


@dataclass(slots=True)
class DrainPlan:
    kill: list[TaskRow] = field(default_factory=list)  # runs to kill now (reason HOST_MAINTENANCE)
    waiting: dict[str, str] = field(default_factory=dict)  # run's task id -> why it stays for now


def is_down(t: TaskRow) -> bool:
    """An instance that should run and does not serve (not RUNNING, or not yet or no longer
    HEALTHY where a health check is set)."""
    return not serving(t.state, t.health) and t.state not in TASK_TERMINAL and t.state != "INITIALIZED"


def down(tasks: Iterable[TaskRow]) -> int:
    """How many instances of a job are down (is_down)."""
    return sum(1 for t in tasks if is_down(t))


def plan_drain(job_id: str, tasks: list[TaskRow], draining: set[str], budget: int) -> DrainPlan:
    """Which of this job's runs on `draining` hosts go now, and why the others wait. `tasks`: every
    task of the job; `budget`: its sla.maximumUnavailableInstances (0: no budget, all go)."""
    plan = DrainPlan()
    movers = [t for t in tasks if t.host_id in draining and t.state in ON_HOST]
    if not movers:
        return plan
    if budget <= 0:
        plan.kill = movers
        return plan
    plan.kill = [t for t in movers if not serving(t.state, t.health)]  # down already
    running = [t for t in movers if serving(t.state, t.health)]
    now_down = down(tasks)
    room = max(0, budget - now_down)
    plan.kill += running[:room]
    for t in running[room:]:
        plan.waiting[t.task_id] = (f"{WAITING}{t.host_id} waits: job {job_id} has {now_down + min(room, len(running))} "
                                   f"of its sla.maximumUnavailableInstances {budget} down")
    return plan
