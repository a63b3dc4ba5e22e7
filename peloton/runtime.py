"""The one Kafka runtime every stage runs on.

A stage is a `Stage` (pure-ish handler code) run by `StageRuntime`, which owns the Kafka plumbing:

    poll a batch -> decode (bad bytes go to the dead-letter topic) -> stage.handle(batch)
    -> stage.tick(now) -> flush what was produced -> commit offsets

Offsets are committed only after everything produced for the batch is flushed (at-least-once),
and never past a message the stage still holds (`Stage.held_offsets`): a gang waiting for room
or for a host is redelivered to whichever instance owns its partition after a crash.
SIGTERM finishes the batch, commits and leaves the group.
"""

from __future__ import annotations

import logging
import signal
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from peloton.config import Settings
from peloton.serde import DecodeError, SchemaRegistry, registry
from peloton.topics import Catalogue, partition_for

log = logging.getLogger("peloton.runtime")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class Record:
    """One decoded input message."""

    topic: str  # logical topic id
    partition: int
    offset: int
    key: str | None
    schema: str
    value: dict
    raw_key: bytes | None
    raw_value: bytes | None


def producer_config(settings: Settings) -> dict:
    return {
        "bootstrap.servers": settings.bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "compression.type": "none",
        # Java-compatible key hashing, so other producers land keys on the same partitions.
        "partitioner": "murmur2_random",
    }


class DeliveryError(RuntimeError):
    """Produced messages did not reach the broker."""


class Emitter:
    """Encodes and produces records for a stage; knows partition counts for explicit keying."""

    def __init__(self, producer: Producer, catalogue: Catalogue, serde: SchemaRegistry, stage: str):
        self.producer = producer
        self.catalogue = catalogue
        self.serde = serde
        self.stage = stage
        self.produced = 0
        self.dead_lettered = 0
        self._errors: list[str] = []

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def emit(self, topic: str, key: str, schema: str, value: dict, partition: int | None = None) -> None:
        spec = self.catalogue[topic]
        data = self.serde.encode(schema, value)
        if partition is None:
            partition = partition_for(key, spec.partitions)
        self._produce(spec.name, key.encode(), data, partition)

    def _produce(self, topic: str, key: bytes | None, value: bytes, partition: int) -> None:
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, partition=partition, on_delivery=self._on_delivery)
                break
            except BufferError:  # local queue full: let librdkafka drain, then retry
                self.producer.poll(0.05)
        self.produced += 1

    def dead_letter(self, record_or_msg, reason: str) -> None:
        """Park a message we cannot use, with where it came from and why; the stage goes on."""
        if isinstance(record_or_msg, Record):
            topic = self.catalogue[record_or_msg.topic].name
            part, off = record_or_msg.partition, record_or_msg.offset
            key, value = record_or_msg.raw_key, record_or_msg.raw_value
        else:
            topic, part, off = record_or_msg.topic(), record_or_msg.partition(), record_or_msg.offset()
            key, value = record_or_msg.key(), record_or_msg.value()
        log.warning("dead-letter %s[%d]@%d: %s", topic, part, off, reason)
        dl = {
            "source_topic": topic,
            "partition": part,
            "offset": off,
            "key": key,
            "value": value,
            "stage": self.stage,
            "reason": reason,
            "timestamp_ms": now_ms(),
        }
        self.emit("dead-letters", topic, "peloton.DeadLetter", dl)
        self.dead_lettered += 1

    def flush(self, timeout: float = 30.0) -> None:
        remaining = self.producer.flush(timeout)
        if remaining:
            raise DeliveryError(f"{remaining} messages not delivered to the broker within {timeout:g}s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise DeliveryError("delivery failed: " + "; ".join(errors[:5]))


class Stage:
    """A stage's logic as the runtime sees it. Subclasses override what they need."""

    name = "stage"
    inputs: tuple[str, ...] = ()

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

    def held_offsets(self) -> dict[tuple[str, int], int]:
        """Lowest offset per (topic id, partition) that must be read again after a crash."""
        return {}

    def close(self) -> None:
        pass


class StageRuntime:
    def __init__(self, stage: Stage, settings: Settings, instance_id: str | None = None):
        self.stage = stage
        self.settings = settings
        self.catalogue = Catalogue(settings.topic_prefix)
        self.serde = registry()
        self.instance_id = instance_id or f"{stage.name}-{uuid.uuid4().hex[:8]}"
        self._running = True
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap,
                "group.id": self.catalogue.group(stage.name),
                "client.id": self.instance_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": settings.session_timeout_ms,
                "heartbeat.interval.ms": max(100, settings.session_timeout_ms // 6),
                "partition.assignment.strategy": "cooperative-sticky",
                "fetch.wait.max.ms": 50,
            }
        )
        self.producer = Producer(producer_config(settings))
        self.emitter = Emitter(self.producer, self.catalogue, self.serde, stage.name)
        stage.bind(self.emitter, settings, self.catalogue)
        self._next: dict[tuple[str, int], int] = {}  # next offset to commit, per (topic id, partition)
        self._committed: dict[tuple[str, int], int] = {}
        self.assigned: set[tuple[str, int]] = set()
        self.batches = 0
        self.records = 0

    # -- rebalance ------------------------------------------------------------------------
    def _ids(self, partitions: Iterable[TopicPartition]) -> list[tuple[str, int]]:
        return [(self.catalogue.by_name[tp.topic].id, tp.partition) for tp in partitions]

    def _on_assign(self, consumer, partitions) -> None:
        ids = self._ids(partitions)
        self.assigned.update(ids)
        log.info("%s assigned %s", self.instance_id, ids)
        self.stage.on_assign(ids)

    def _on_revoke(self, consumer, partitions) -> None:
        ids = self._ids(partitions)
        # Everything handled so far is flushed and committed at the end of each loop, so the next
        # owner starts exactly after it; only held messages are read again.
        self._flush_and_commit()
        self._forget(ids, "revoked")

    def _on_lost(self, consumer, partitions) -> None:
        # The group already gave these away (this member missed its session timeout): a commit
        # would be refused, so drop them; the next owner reads again from the last commit.
        self._forget(self._ids(partitions), "lost")

    def _forget(self, ids: list[tuple[str, int]], how: str) -> None:
        self.assigned.difference_update(ids)
        for tp in ids:
            self._next.pop(tp, None)
            self._committed.pop(tp, None)
        log.info("%s %s %s", self.instance_id, how, ids)
        self.stage.on_revoke(ids)

    # -- main loop ------------------------------------------------------------------------
    def stop(self, *_args) -> None:
        self._running = False

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run(self, max_seconds: float | None = None) -> None:
        topics = [self.catalogue[t].name for t in self.stage.inputs]
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        deadline = time.monotonic() + max_seconds if max_seconds else None
        try:
            while self._running and (deadline is None or time.monotonic() < deadline):
                self.run_once()
        finally:
            self._shutdown()

    def run_once(self) -> None:
        msgs = self.consumer.consume(self.settings.max_batch, self.settings.poll_timeout_s)
        records = self._decode(msgs) if msgs else []
        if records:
            self.stage.handle(records)
            self.records += len(records)
            self.batches += 1
        self.stage.tick(time.monotonic())
        self._flush_and_commit()

    def _decode(self, msgs) -> list[Record]:
        records = []
        by_name = self.catalogue.by_name
        decode = self.serde.decode
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error: %s", err)
                continue
            spec = by_name[m.topic()]
            tp = (spec.id, m.partition())
            self._next[tp] = m.offset() + 1
            raw_key, raw_value = m.key(), m.value()
            try:
                schema, value = decode(raw_value)
            except DecodeError as exc:
                self.emitter.dead_letter(m, f"undecodable: {exc}")
                continue
            if schema not in spec.value_schemas:
                self.emitter.dead_letter(m, f"schema {schema} is not allowed on {spec.id} (allowed: {', '.join(spec.value_schemas)})")
                continue
            key = raw_key.decode("utf-8", "replace") if raw_key is not None else None
            records.append(Record(spec.id, m.partition(), m.offset(), key, schema, value, raw_key, raw_value))
        return records

    def _flush_and_commit(self) -> None:
        self.emitter.flush()
        held = self.stage.held_offsets()
        offsets = []
        for tp, nxt in self._next.items():
            target = min(nxt, held[tp]) if tp in held else nxt
            if self._committed.get(tp) != target and tp in self.assigned:
                offsets.append(TopicPartition(self.catalogue[tp[0]].name, tp[1], target))
                self._committed[tp] = target
        if offsets:
            self.consumer.commit(offsets=offsets, asynchronous=False)

    def _shutdown(self) -> None:
        try:
            self._flush_and_commit()
        except Exception:  # still leave the group cleanly; uncommitted work is redelivered
            log.exception("final commit failed")
        self.consumer.close()  # leaves the group so partitions move at once
        self.stage.close()
        self.producer.flush(10)


class CompactedView:
    """Last value per key of a compacted topic, read in full by every instance (faust-table style).

    Tansu does not compact, so this reads the whole history and keeps the latest per key, which is
    also what a reader of a compacted Kafka topic must do."""

    def __init__(self, settings: Settings, topic: str, catalogue: Catalogue | None = None):
        self.catalogue = catalogue or Catalogue(settings.topic_prefix)
        self.spec = self.catalogue[topic]
        self.serde = registry()
        self.values: dict[str, dict] = {}
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap,
                "group.id": f"{self.catalogue.prefix}peloton.view.{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 20,
            }
        )
        self.consumer.assign([TopicPartition(self.spec.name, p, OFFSET_BEGINNING) for p in range(self.spec.partitions)])

    def poll(self, timeout: float = 0.0, max_messages: int = 5000) -> list[tuple[str, dict]]:
        """Read what has arrived: every (key, value) in order; `values` keeps the latest per key."""
        changes: list[tuple[str, dict]] = []
        while True:
            msgs = self.consumer.consume(max_messages, timeout)
            if not msgs:
                return changes
            for m in msgs:
                if m.error() is not None or m.key() is None:
                    continue
                try:
                    _, value = self.serde.decode(m.value())
                except DecodeError:
                    log.warning("skipping undecodable record on %s@%d", self.spec.name, m.offset())
                    continue
                key = m.key().decode()
                self.values[key] = value
                changes.append((key, value))
            timeout = 0.0

    def close(self) -> None:
        self.consumer.close()


class HeldOffsets:
    """Messages a stage still holds, per partition, so the runtime commits no further than the
    oldest one. Offsets arrive in order per partition; release may come in any order."""

    def __init__(self):
        self._queues: dict[tuple[str, int], deque[int]] = {}
        self._released: dict[tuple[str, int], set[int]] = {}

    def hold(self, tp: tuple[str, int], offset: int) -> None:
        self._queues.setdefault(tp, deque()).append(offset)

    def release(self, tp: tuple[str, int], offset: int) -> None:
        if tp in self._queues:
            self._released.setdefault(tp, set()).add(offset)

    def drop(self, tp: tuple[str, int]) -> None:
        self._queues.pop(tp, None)
        self._released.pop(tp, None)

    def lowest(self) -> dict[tuple[str, int], int]:
        out = {}
        for tp, q in self._queues.items():
            done = self._released.get(tp)
            while q and done and q[0] in done:
                done.discard(q.popleft())
            if q:
                out[tp] = q[0]
        return out
