"""A host's authoritative accounting. Pure: no Kafka, no store."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

from peloton.model.resources import Allocations, Resources


@dataclass(slots=True)
class HostLedger:
    host_id: str
    capacity: Resources
    held: Allocations = field(default_factory=Allocations)

    def try_reserve(self, task_id: str, need: Resources) -> bool:
        """Take room for a task if it fits (optimistic concurrency: placements are checked here)."""
        if task_id in self.held:
            return True
        if not self.held.sum.fits_with(need, self.capacity):
            return False
        self.held.charge(task_id, need)
        return True

    def release(self, task_id: str) -> bool:
        return self.held.release(task_id)


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
        if ledger.try_reserve(task["task_id"], Resources.of_read(task["resources"])):
            verdict.accepted.append((task, host_id))
        else:
            verdict.refused.append((task, host_id, "host no longer has room for the task"))
    return verdict
