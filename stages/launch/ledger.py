"""A host's authoritative accounting. Pure: no Kafka, no store."""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass, field

from peloton.model.resources import EPS, Allocations, Resources

LENT_STEP = 0.1  # cpu: host-state hears of what is lent when it moves by a step (measurements jitter)


@dataclass(slots=True)
class HostLedger:
    """What the host manager has charged to a host. A revocable run's cpu is not in `held`: it
    runs on slack, the cpu that non-revocable runs leave unallocated plus what they hold but do
    not use (`use`, as the host's agent measures it), and is the first to go when they want it
    back (over_slack)."""

    host_id: str
    capacity: Resources
    held: Allocations = field(default_factory=Allocations)  # every run's resources, but revocable cpu
    revocable: dict[str, float] = field(default_factory=dict)  # revocable run -> its cpu, oldest first
    use: dict[str, float] = field(default_factory=dict)  # run -> the cpu its agent measured it using
    lent: float = 0.0  # unused_cpu() as host-state last heard it, in LENT_STEPs

    def try_reserve(self, task_id: str, need: Resources, revocable: bool = False) -> bool:
        """Take room for a task if it fits (optimistic concurrency: placements are checked here)."""
        if task_id in self.held:
            return True
        if revocable and need.cpu > self.slack_room() + EPS:
            return False
        if not self.held.sum.fits_with(_held_part(need, revocable), self.capacity):
            return False
        self.hold(task_id, need, revocable)
        return True

    def hold(self, task_id: str, need: Resources, revocable: bool = False) -> None:
        """Charge a run that runs already (no room checked)."""
        if revocable:
            self.revocable[task_id] = need.cpu
        self.held.charge(task_id, _held_part(need, revocable))

    def release(self, task_id: str) -> bool:
        self.revocable.pop(task_id, None)
        self.use.pop(task_id, None)
        return self.held.release(task_id)

    def unused_cpu(self) -> float:
        """The cpu non-revocable runs hold but, measured, do not use: lent to revocable runs."""
        by_key, revocable = self.held.by_key, self.revocable
        return sum(max(0.0, by_key[t].cpu - used) for t, used in self.use.items()
                   if t in by_key and t not in revocable)

    def slack(self) -> float:
        """The cpu revocable runs may hold: what non-revocable runs leave unallocated, and what
        they hold unused."""
        return self.capacity.cpu - self.held.total.cpu + self.unused_cpu()

    def revocable_cpu(self) -> float:
        """The cpu revocable runs hold, on the slack."""
        return sum(self.revocable.values())

    def slack_room(self) -> float:
        """The cpu a new revocable run may take: the slack less what revocable runs hold."""
        return self.slack() - self.revocable_cpu()

    def measure(self, usage: list[dict]) -> bool:
        """An agent's measurements (AgentReport's usage). A run the agent says is revocable but
        that is charged whole here (adopted from an earlier host manager) moves to slack. True when
        host-state should hear of it: what is lent moved by a step, or a run moved."""
        moved = False
        use = {}
        for u in usage:
            t, cpu = u["task_id"], u["cpu"]
            if t not in self.held.by_key or not math.isfinite(cpu) or cpu < 0:
                continue  # gone, or no measurement (an agent's numbers are checked, never trusted)
            use[t] = cpu
            if u.get("revocable") and t not in self.revocable:
                r = self.held.by_key[t]
                self.held.release(t)
                self.hold(t, r, revocable=True)
                moved = True
        self.use = use
        lent = math.floor(self.unused_cpu() / LENT_STEP + EPS) * LENT_STEP
        if moved or abs(lent - self.lent) > EPS:
            self.lent = lent
            return True
        return False

    def over_slack(self, leaving: Container[str]) -> list[str]:
        """The revocable runs to kill so that those left fit in the slack, youngest first: none
        while they fit. `leaving`: runs being killed already (counted as gone)."""
        slack = self.slack()
        staying = sum(cpu for t, cpu in self.revocable.items() if t not in leaving)
        victims = []
        for t in reversed(self.revocable):
            if staying <= slack + EPS:
                break
            if t not in leaving:
                victims.append(t)
                staying -= self.revocable[t]
        return victims


def _held_part(need: Resources, revocable: bool) -> Resources:
    """What of a run `held` charges: all of it, but a revocable run's cpu (on the slack)."""
    return need.without_cpu() if revocable else need


@dataclass(slots=True)
class Verdict:
    """What the host manager does with one placement."""

    accepted: list[tuple[dict, str]] = field(default_factory=list)  # (launch spec, host id): reserved here
    refused: list[tuple[dict, str, str]] = field(default_factory=list)  # (launch spec, host id, why)
    applied_on: list[str] = field(default_factory=list)  # hosts whose next report lists the placement


def judge_placement(assignments: list[dict], ledgers: dict[str, HostLedger], running: Container[str],
                    served: Container[str]) -> Verdict | str:
    """Check a placement against the authoritative ledgers of the hosts this instance serves
    (optimistic concurrency: place decided on a view that may be stale). Reserves room for what it
    accepts. A string is the reason the placement cannot be used at all (a host nobody serves)."""
    unknown = [a["host_id"] for a in assignments if a["host_id"] not in served]
    if unknown:
        return f"placement names unknown host {unknown[0]!r}"
    verdict = Verdict()
    for a in assignments:
        task, host_id = a["task"], a["host_id"]
        ledger = ledgers.get(host_id)
        if ledger is None:  # another shard's host: its owner changed under the placement
            verdict.refused.append((task, host_id, "host is not served by this shard's host manager"))
            continue
        verdict.applied_on.append(host_id)
        if task["task_id"] in running:
            continue  # a repeat of a placement already running here
        if ledger.try_reserve(task["task_id"], Resources.of_read(task["resources"]), task.get("revocable", False)):
            verdict.accepted.append((task, host_id))
        else:
            why = "host no longer has room for the task"
            if task.get("revocable"):
                why += " (a revocable task's cpu comes from the host's slack)"
            verdict.refused.append((task, host_id, why))
    return verdict
