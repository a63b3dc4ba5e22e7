"""What the job manager sends, gathered while it decides and sent by the stage once its batch's
store writes are made. Pure data: no Kafka here.

Two queues keep the order the stage sends in: `now` (kills, dead letters, demand a workflow
starts) goes first, in the order decided, and `later` (a batch's demand and releases) after it,
as the stage's batch output always has."""

from __future__ import annotations

from dataclasses import dataclass, field

from peloton.model.events import task_kill
from peloton.runtime import Record

EMIT, EVERY, DEAD = "emit", "every", "dead"  # how a `now` item goes: to its key's partition, to all, a dead letter

Out = tuple[str, str, str, dict]  # (topic, key, schema, value)


@dataclass(slots=True)
class Outbox:
    # (EMIT | EVERY, topic, key, schema, value) or (DEAD, record, reason)
    now: list[tuple] = field(default_factory=list)
    later: list[Out] = field(default_factory=list)

    def kill(self, job_id: str, instance: int, run_id: int, task_id: str, reason: str, message: str,
             now: int) -> None:
        """A TaskKill on every host shard's partition: whichever has the run stops it."""
        self.now.append((EVERY, "placements", task_id, "peloton.TaskKill",
                         task_kill(job_id, instance, run_id, task_id, reason, message, now)))

    def dead_letter(self, record: Record, reason: str) -> None:
        self.now.append((DEAD, record, reason))

    def demand_now(self, out: list[Out]) -> None:
        self.now.extend((EMIT, *o) for o in out)

    def take(self, other: Outbox) -> None:
        """Another box's sends after this one's, each queue in its order."""
        self.now.extend(other.now)
        self.later.extend(other.later)

    def empty(self) -> bool:
        return not self.now and not self.later
