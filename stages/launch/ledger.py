"""A host's authoritative accounting. Pure: no Kafka, no store."""

from __future__ import annotations

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
        if not (self.held.total + need).fits_in(self.capacity):
            return False
        self.held.charge(task_id, need)
        return True

    def release(self, task_id: str) -> bool:
        return self.held.release(task_id)
