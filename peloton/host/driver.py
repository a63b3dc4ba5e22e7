"""The agent-driver contract: how a host manager (the launch stage, or a host's agent) runs tasks
on a host and hears back.

The host manager calls a driver from a single thread: launch() for accepted placements,
then poll() on every loop iteration; each TaskUpdate it returns is published as a Mesos
task-state event. Drivers therefore never block on a task and never need locks.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from peloton.model.mesos import MESOS_TERMINAL, MesosState, Reason
from peloton.model.quick_init import quick_init
from peloton.model.resources import Resources


@quick_init  # one per run launched
@dataclass(frozen=True, slots=True)
class LaunchRequest:
    task_id: str
    job_id: str
    instance: int
    run_id: int
    host_id: str
    command: str
    shell: bool
    arguments: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    resources: Resources = Resources()
    kill_grace_seconds: float = 30.0
    user: str = ""  # the job's command.user; "": the agent's choice
    image: str = ""  # the container image it runs in; "": the host's own file system
    health_check: str | None = None  # the task's health check as JSON (peloton/model/health.py); None: none
    volume: tuple[str, str] | None = None  # (volume id, containerPath) of its persistent volume; None: none
    revocable: bool = False  # runs on slack its host's other runs lend: the first to go when they want it


class RunUse(NamedTuple):
    """What a run measured uses now (AgentReport's RunUsage)."""

    cpu: float  # cores
    mem_mb: float  # resident
    revocable: bool


@quick_init  # several per run
@dataclass(frozen=True, slots=True)
class TaskUpdate:
    task_id: str
    host_id: str
    state: str  # a MesosState
    timestamp_ms: int  # wall clock, milliseconds since the epoch
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    signal: int | None = None
    health: str = ""  # HEALTH_UNKNOWN, HEALTHY or UNHEALTHY where this update tells the run's health
    # What the run used, where its cgroup counted it (an ended run's last update; also in its message)
    cpu_seconds: float | None = None
    peak_mem_mb: float | None = None

    @property
    def terminal(self) -> bool:
        return self.state in MESOS_TERMINAL


def now_ms() -> int:
    return int(time.time() * 1000)


def update_for(request: LaunchRequest, state: str, **fields: Any) -> TaskUpdate:
    """A TaskUpdate for `request`, stamped now."""
    return TaskUpdate(request.task_id, request.host_id, state, now_ms(), **fields)


def exit_update(request: LaunchRequest, exit_code: int) -> TaskUpdate:
    """The terminal update for a command that exited on its own with `exit_code`."""
    if exit_code == 0:
        return update_for(request, MesosState.TASK_FINISHED, exit_code=0)
    return update_for(
        request,
        MesosState.TASK_FAILED,
        reason=Reason.COMMAND_EXECUTOR_FAILED,
        message=f"command exited with code {exit_code}",
        exit_code=exit_code,
    )


class AgentDriver(ABC):
    """Runs tasks somewhere and reports their Mesos state changes through poll()."""

    @abstractmethod
    def launch(self, requests: Sequence[LaunchRequest]) -> None:
        """Start a batch of tasks; returns without waiting for them to run.

        A request whose task_id is already active is ignored.
        """

    @abstractmethod
    def kill(self, task_ids: Sequence[str]) -> None:
        """Ask tasks to stop; TASK_KILLED arrives through poll(). Unknown ids are ignored."""

    def kill_now(self, task_ids: Sequence[str]) -> None:
        """Stop tasks at once, without their grace period (an agent fencing itself)."""
        self.kill(task_ids)

    @abstractmethod
    def poll(self) -> list[TaskUpdate]:
        """Non-blocking: every update since the last call, in order per task."""

    @abstractmethod
    def active(self) -> set[str]:
        """Ids of tasks launched whose terminal update has not been returned yet."""

    @abstractmethod
    def close(self) -> None:
        """Kill everything still running and reap it; idempotent.

        The resulting TASK_KILLED updates can still be collected with one last poll().
        """

    def reap_orphans(self, task_ids: Sequence[str]) -> dict[str, str]:
        """Stop what still runs of tasks that an earlier driver (one in a launch process that died
        without close()) started and no driver runs now, before they are reported TASK_LOST.

        Returns task id -> a short description of what was done, only for tasks that had
        something running. Blocks for at most a few seconds in all; never raises. The default
        has nothing to do: drivers whose tasks cannot outlive them (the simulated one) keep it.
        """
        return {}

    def reap_orphan(self, task_id: str) -> str | None:
        """reap_orphans() for one task: what was done, or None when nothing of it was running."""
        return self.reap_orphans([task_id]).get(task_id)

    def orphan_ending(self, task_id: str, host_id: str) -> TaskUpdate | None:
        """How a run an earlier driver started ended, where that outlives the driver; None when it
        cannot be known (then the run is reported lost). The default never knows."""
        return None

    def delete_volumes(self, host_id: str, volume_ids: Sequence[str]) -> None:  # noqa: B027 (a hook)
        """Remove persistent volumes from a host. The default keeps none (a simulated host's
        volumes are only rows in the store)."""

    def extend_lease(self, until: float) -> None:  # noqa: B027 (a hook: by default none)
        """The agent's lease now ends at `until` (time.monotonic()): runs that outlive their agent
        hold it too, and end with it (the local driver's executors). The default has no such runs."""

    def hand_over(self, lease_until: float, adopted: Sequence[str] = ()) -> list[str]:
        """Leave the runs (its own, and those `adopted` from an earlier driver) going for the next
        agent of the host, fenced at `lease_until` (seconds since the epoch) if none takes them
        over; the task ids left. The default leaves none: its runs end with it."""
        return []

    def take_over(self, task_ids: Sequence[str]) -> None:  # noqa: B027 (a hook: by default none)
        """Runs an earlier driver handed over, now held by this one. The default has none."""

    def watch_adopted(self, runs: Sequence[tuple[LaunchRequest, float]]) -> None:  # noqa: B027 (a hook: by default none)
        """Go on checking the health of runs adopted from an earlier driver (each with when it
        started, seconds since the epoch; news from poll()). The default checks none."""

    def let_go(self, task_ids: Sequence[str]) -> None:  # noqa: B027 (a hook: by default none)
        """Adopted runs that ended or were killed elsewhere: no more news of them."""

    def gpus_of(self, task_id: str) -> tuple[str, ...]:
        """The GPU devices a run holds. The default gives out none."""
        return ()

    def hold_gpus(self, runs: dict[str, tuple[str, tuple[str, ...]]]) -> None:  # noqa: B027 (a hook: by default none)
        """Runs adopted from an earlier driver keep their GPUs (task id -> host, GPUs) until let_go()."""

    def usage(self) -> dict[str, RunUse]:
        """What each of its runs uses now, where it measures them (a run measured once at least
        over a whole interval); the default measures none, and its hosts lend no slack."""
        return {}

    def clear_leftovers(self, keep: set[str]) -> list[str]:
        """Remove what earlier drivers left of runs that neither this driver nor `keep` (runs
        adopted from them) holds: their cgroups and containers. Returns the task ids cleared. The
        default has none: drivers whose tasks leave nothing behind keep it."""
        return []

