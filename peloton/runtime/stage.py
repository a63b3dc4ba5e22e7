"""The stage contract: what the runtime calls on a stage's logic, and how a batch is handled so
that a record at fault is dead-lettered and the rest of the batch is not lost."""

from __future__ import annotations

import logging

from peloton.config import Settings
from peloton.model.events import task_errors
from peloton.runtime.emitter import Emitter
from peloton.runtime.errors import RecordError, is_transient
from peloton.runtime.record import Record
from peloton.topics import Catalogue

log = logging.getLogger("peloton.runtime")


class Stage:
    """A stage's logic as the runtime sees it. Subclasses override what they need.

    handle() may raise: the runtime then finds the record at fault, dead-letters it and goes on.
    It must therefore be safe to call again with records it has seen (every handler is idempotent
    anyway, for at-least-once delivery), and it should emit only through `self.emit`, whose
    output the runtime discards when the handler fails."""

    name = "stage"
    inputs: tuple[str, ...] = ()
    # How the group shares partitions among instances: cooperative-sticky moves only what must
    # move; "range" gives an instance the same partition numbers of every input, for a stage whose
    # inputs share a key (admit: a job's commands and statuses in one instance).
    assignment = "cooperative-sticky"

    def bind(self, emitter: Emitter, settings: Settings, catalogue: Catalogue) -> None:
        self.emit = emitter
        self.settings = settings
        self.catalogue = catalogue

    def on_assign(self, partitions: list[tuple[str, int]]) -> None:
        pass

    def on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        pass

    def handle(self, records: list[Record]) -> None:
        pass

    def tick(self, now: float) -> None:
        pass

    def weight(self, record: Record) -> int:
        """How many tasks the record brings into a turn, for a stage where one record can bring
        many (admit: a create); the runtime ends a turn at settings.max_turn_tasks. A stage that
        does not override it is not weighed."""
        return 1

    def held_offsets(self) -> dict[tuple[str, int], int]:
        """Lowest offset per (topic id, partition) that must be read again after a crash."""
        return {}

    def caught_up(self, topic: str, partitions: list[int]) -> bool:
        """Whether this instance has handled all that was written to these partitions of its
        input until now (the runtime asks the broker; alone, in unit tests, it always has)."""
        return True

    def ends(self, topic: str, partitions: list[int]) -> dict[int, int] | None:
        """The partitions' high-water marks now, or None when the broker does not say (the
        runtime asks it; alone, in unit tests, nothing is known)."""
        return None

    def recover(self) -> None:
        """The broker lost every message and offset (it restarted empty): send again, from the
        store, what downstream stages may never have read. Called after partitions are assigned."""

    def views(self) -> list:
        """The compacted-topic views this stage reads: read again from the start when the broker
        lost its log (their topics start again at offset 0, below where the views stood)."""
        return []

    def refuse(self, record: Record, tasks: list[dict], reason: str) -> None:
        """Give up on a record that carries tasks: a dead letter for operators and a TASK_ERROR per
        task, so the job manager fails those runs with the reason instead of leaving them waiting."""
        self.emit.dead_letter(record, reason)
        for status in task_errors(tasks, f"{self.name}: {reason}"):
            self.emit.emit("task-status", status["job_id"], "peloton.TaskStatus", status)

    def close(self) -> None:
        pass


def handle_batch(stage: Stage, records: list[Record], emitter: Emitter) -> int:
    """Let the stage handle a batch. When its handler raises for a reason other than the broker
    or the store being away, handle the records one by one to find those at fault and
    dead-letter each with the exception, so the rest of the batch is not lost. Output of a failed
    call is discarded; transient failures propagate (the caller tries the batch again).
    Returns how many records were dead-lettered."""
    emitter.send()  # what came before (decode dead letters) stays sent whatever happens below
    emitter.holding = True
    try:
        try:
            stage.handle(records)
            emitter.send()
            return 0
        except Exception as exc:
            emitter.discard()
            if is_transient(exc):
                raise
            log.warning("a batch of %d failed (%s: %s); handling its records one by one",
                        len(records), type(exc).__name__, exc)
        failed = 0
        for r in records:
            try:
                stage.handle([r])
            except Exception as exc:
                emitter.discard()
                if is_transient(exc):
                    raise
                log.warning("record %s[%d]@%d failed", r.topic, r.partition, r.offset, exc_info=True)
                reason = str(exc) if isinstance(exc, RecordError) else f"{type(exc).__name__}: {exc}"
                emitter.dead_letter(r, f"{stage.name} could not handle it: {reason}", "handler_error")
                failed += 1
            emitter.send()
        return failed
    finally:
        emitter.holding = False
