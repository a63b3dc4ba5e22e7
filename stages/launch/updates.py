"""What the drivers' updates of a tick say: the status events to publish (a run's TASK_STARTING and
TASK_RUNNING of one instant as one record), the runs that ended (their statuses kept with their
launches, sent again if the broker loses them), and each run's last state."""

from __future__ import annotations

from dataclasses import dataclass, field

from peloton.host.driver import TaskUpdate
from peloton.model.events import StatusRuns, task_status
from peloton.model.mesos import MesosState
from stages.launch.hosts import Run
from stages.launch.requests import running_health


@dataclass(slots=True)
class DriverNews:
    runs: StatusRuns = field(default_factory=StatusRuns)
    ended: dict[str, dict] = field(default_factory=dict)  # task id -> its TaskStatus record
    moved: list[tuple[str, str]] = field(default_factory=list)  # (task id, Mesos state), in order


def read_updates(updates: list[TaskUpdate], running: dict[str, Run],
                 kill_reasons: dict[str, tuple[str, str]]) -> DriverNews:
    """The news of `updates` about the runs `running` here (others are ignored); a kill someone
    asked for says who (its reason and message from `kill_reasons`)."""
    news = DriverNews()
    for u in updates:
        entry = running.get(u.task_id)
        if entry is None:
            continue
        spec = entry.spec
        reason, message = u.reason, u.message
        if u.state == MesosState.TASK_KILLED and u.task_id in kill_reasons:
            reason, message = kill_reasons[u.task_id]
        health = u.health or running_health(u.state, spec)
        news.runs.add(spec["job_id"], spec["instance"], spec["run_id"], u.host_id, u.state, u.timestamp_ms, reason,
                      message, u.exit_code, u.signal, health)
        news.moved.append((u.task_id, u.state))
        if u.terminal:
            news.ended[u.task_id] = task_status(spec["job_id"], spec["instance"], spec["run_id"], u.task_id,
                                                u.host_id, u.state, reason, message, u.exit_code, u.signal,
                                                u.timestamp_ms, health=health)
    return news
