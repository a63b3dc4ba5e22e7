"""Lockdown, as Peloton's v1alpha AdminService has it: an operator freezes a part of the cluster's
job work (Read: reading jobs and tasks; Write: every job command that changes one; Kill: stopping
runs) until it is unlocked, whoever asks, through the API or a producer's commands. Pure: the API
and the job manager ask the same functions, the store keeps what is locked."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping

COMPONENTS = ("GoalStateEngine", "Read", "Write", "Kill", "Launch")  # Peloton's enum, in its order
LOCKABLE = ("Read", "Write", "Kill")
NOT_LOCKABLE = {
    "GoalStateEngine": "there is no goal-state engine here: the job manager (the admit stage) acts on each command "
                       "and status as it comes; lock Write and Kill to freeze job changes, or stop the admit stage",
    "Launch": "not supported, as in Peloton: launches follow placements; lock Write to stop new jobs and updates",
}
# Job commands and API actions that stop runs; every other change of a job is a Write.
_KILLS = frozenset({"STOP", "job.stop"})


def component_problem(name: str) -> str | None:
    if name not in COMPONENTS:
        return f"no component {name!r}: Peloton's components are {', '.join(COMPONENTS)}"
    return NOT_LOCKABLE.get(name)


def component_of_action(action: str) -> str | None:
    """The component an API action needs unlocked (None: none, e.g. pools, hosts, tokens)."""
    if action in _KILLS:
        return "Kill"
    if action == "job.read":
        return "Read"
    if action.startswith(("job.", "update.")):
        return "Write"
    return None


def component_of_command(kind: str) -> str:
    """The component a job command needs unlocked."""
    return "Kill" if kind in _KILLS else "Write"


def locked_out(component: str | None, locks: Mapping[str, Mapping]) -> str | None:
    """Why the component is refused now (its lock, who set it and since when), or None."""
    lock = locks.get(component or "")
    if lock is None:
        return None
    by = f" by {lock['locked_by']}" if lock.get("locked_by") else ""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(lock["locked_ms"] / 1000))
    return (f"the cluster is locked down for {component}{by} since {since}: "
            f"`pelotonctl admin unlock {component}` lifts it")


class LockdownReads:
    """The lockdown as last read, read again at most once every `period_s` (every request or
    batch asks; a lock reaches them that late at most). A read that raises one of `kept_on`
    leaves the last one read in place."""

    def __init__(self, read: Callable[[], dict[str, dict]], period_s: float = 1.0,
                 kept_on: tuple[type[Exception], ...] = (), clock: Callable[[], float] = time.monotonic) -> None:
        self._read, self._period_s, self._kept_on, self._clock = read, period_s, kept_on, clock
        self.locks: dict[str, dict] = {}
        self.next_read = 0.0  # clock() when it is read again

    def current(self, fresh: bool = False) -> dict[str, dict]:
        now = self._clock()
        if fresh or now >= self.next_read:
            self.next_read = now + self._period_s
            with contextlib.suppress(*self._kept_on):
                self.locks = self._read()
        return self.locks
