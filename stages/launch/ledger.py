"""A host's authoritative accounting. Pure: no Kafka, no store."""

from __future__ import annotations

from dataclasses import dataclass, field

from peloton.model.resources import ZERO, Resources


@dataclass(slots=True)
class HostLedger:
    host_id: str
    capacity: Resources
    allocated: Resources = ZERO
    tasks: dict[str, Resources] = field(default_factory=dict)

    def try_reserve(self, task_id: str, need: Resources) -> bool:
        """Take room for a task if it fits (optimistic concurrency: placements are checked here)."""
        if task_id in self.tasks:
            return True
        if not (self.allocated + need).fits_in(self.capacity):
            return False
        self.tasks[task_id] = need
        self.allocated = self.allocated + need
        return True

    def release(self, task_id: str) -> bool:
        need = self.tasks.pop(task_id, None)
        if need is None:
            return False
        self.allocated = self.allocated - need
        return True
