"""What a stage produces: encoded, kept in bundles while a handler runs, and sent (within the
stage's transaction when it has one) or parked on the dead-letter topic."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer

from peloton import metrics
from peloton.runtime.errors import DeliveryError, RecordTooLarge
from peloton.runtime.record import Record, now_ms
from peloton.runtime.transaction import BatchTransaction
from peloton.serde import BUNDLES, SchemaRegistry, registry, unbundle
from peloton.topics import Catalogue, partition_for

log = logging.getLogger("peloton.runtime")


# Records of one bundle at most: a reader's batch is counted in records, and a bundle is read whole.
BUNDLE_MAX_ITEMS = 500


@dataclass(slots=True)
class _Bundle:
    """Records of one schema and key, kept to go as one message (see serde.BUNDLES)."""

    topic: str  # topic name
    key: str
    raw_key: bytes
    item: str  # the records' schema
    partition: int
    bodies: list[bytes]
    size: int


class Emitter:
    """Encodes what a stage produces. While `holding` (the runtime holds output while a handler
    or tick runs) it keeps what is emitted until send(), so the output of a failed handler is
    discarded, never half sent; otherwise it hands each record to the producer at once.
    flush() sends what is kept and waits for the broker.

    What is kept goes in bundles where it can: consecutive records of a bundled schema
    (serde.BUNDLES) with the same key on the same partition leave as one message, so a batch
    that admits 1,000 gangs sends a few messages, not 1,000. Every partition keeps the order in
    which its records were emitted; readers get each record back alone (StageRuntime._decode)."""

    def __init__(self, producer: Producer | None, catalogue: Catalogue, serde: SchemaRegistry, stage: str,
                 max_bytes: int = 1_000_000, transaction: BatchTransaction | None = None):
        self.producer = producer
        self.transaction = transaction  # a stage's: what it sends commits with its offsets
        self.catalogue = catalogue
        self.serde = serde
        self.stage = stage
        self.max_bytes = max_bytes
        self.holding = False
        self.produced = 0
        self.dead_lettered = 0
        self._kept: list[tuple[str, bytes | None, bytes, int] | _Bundle] = []  # (topic name, key, value, partition)
        self._open: dict[tuple[str, int], _Bundle] = {}  # (topic name, partition) -> its last kept bundle
        self._errors: list[str] = []
        # (topic name, value) -> the message's headers or None: a job command's signature (see
        # peloton.auth.signing), for emitters outside a stage (the API's, a CLI's).
        self.headers_for: Callable[[str, bytes], list[tuple[str, str | bytes | None]] | None] | None = None

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def emit(self, topic: str, key: str, schema: str, value: dict, partition: int | None = None) -> None:
        spec = self.catalogue[topic]
        raw_key = key.encode()
        bundled = self.holding and schema in BUNDLES
        data = self.serde.encode_body(schema, value) if bundled else self.serde.encode(schema, value)
        if len(data) + len(raw_key) > self.max_bytes:
            raise RecordTooLarge(f"a {schema} of {len(data) + len(raw_key):,} bytes for {spec.id} is larger than "
                                 f"the broker's message limit of {self.max_bytes:,} bytes (PELOTON_MAX_MESSAGE_BYTES)")
        if partition is None:
            partition = partition_for(key, spec.partitions)
        slot = (spec.name, partition)
        if not bundled:
            self._open.pop(slot, None)  # what comes after it on the partition starts a new bundle
            self._kept.append((spec.name, raw_key, data, partition))
            if not self.holding:
                self.send()
            return
        last = self._open.get(slot)
        if (last is None or last.key != key or last.item != schema or len(last.bodies) >= BUNDLE_MAX_ITEMS
                or last.size + len(data) > self.max_bytes):
            # size: the key (twice: a TaskStatuses bundle carries it inside too) and the framing
            last = _Bundle(spec.name, key, raw_key, schema, partition, [], 2 * len(raw_key) + 16)
            self._kept.append(last)
            self._open[slot] = last
        last.bodies.append(data)
        last.size += len(data)

    def emit_to_every_partition(self, topic: str, key: str, schema: str, value: dict) -> None:
        """The same record on every partition of the topic, for whichever reader owns each (a
        kill for a run whose host shard the sender does not know)."""
        for partition in range(self.catalogue[topic].partitions):
            self.emit(topic, key, schema, value, partition=partition)

    def discard(self) -> int:
        """Drop what was emitted since the last send(): the handler that emitted it failed."""
        n = sum(len(k.bodies) if isinstance(k, _Bundle) else 1 for k in self._kept)
        self._kept, self._open = [], {}
        return n

    def _messages(self) -> list[tuple[str, bytes | None, bytes, int]]:
        """What is kept, as messages (topic name, key, value, partition), and forgotten."""
        kept, self._kept, self._open = self._kept, [], {}
        out = []
        for k in kept:
            if not isinstance(k, _Bundle):
                out.append(k)
            elif len(k.bodies) == 1:  # a bundle of one goes as the record itself
                out.append((k.topic, k.raw_key, self.serde.header(k.item) + k.bodies[0], k.partition))
            else:
                out.append((k.topic, k.raw_key, self.serde.bundle(k.item, k.bodies, k.key), k.partition))
        return out

    def send(self) -> None:
        """Hand what is kept to the producer (it delivers in the background)."""
        messages = self._messages()
        transaction = self.transaction
        if transaction is not None:
            for topic, key, value, partition in messages:
                transaction.produce(topic, key, value, partition, None)
                self.produced += 1
            return
        producer = self.producer
        if producer is None:  # only a RecordingEmitter has neither, and its send() is its own
            if messages:
                raise RuntimeError("an Emitter with neither a producer nor a transaction cannot send")
            return
        for topic, key, value, partition in messages:
            while True:
                try:
                    producer.produce(topic, value=value, key=key, partition=partition,
                                     headers=self.headers_for(topic, value) if self.headers_for else None,
                                     on_delivery=self._on_delivery)
                    break
                except BufferError:  # local queue full: let librdkafka drain, then retry
                    producer.poll(0.05)
            self.produced += 1

    def dead_letter(self, record_or_msg: Record | Message, reason: str, kind: str = "refused") -> None:
        """Park a message we cannot use, with where it came from and why; the stage goes on.
        `kind` (undecodable, wrong_schema, handler_error, refused) labels the metric."""
        if isinstance(record_or_msg, Record):
            topic = self.catalogue[record_or_msg.topic].name
            part, off = record_or_msg.partition, record_or_msg.offset
            key, value = record_or_msg.raw_key, record_or_msg.raw_value
            if record_or_msg.index >= 0:  # one record of a bundle: the letter holds it alone, to replay as it is
                try:
                    value = self.serde.encode(record_or_msg.schema, record_or_msg.value)
                except Exception:  # changed by its handler past encoding: keep the whole bundle
                    reason = f"{reason} (record {record_or_msg.index} of the bundle kept here)"
        else:  # a message as read: its topic, partition and offset are set (None only in a message made by hand)
            topic, part, off = record_or_msg.topic() or "", record_or_msg.partition() or 0, record_or_msg.offset() or 0
            key, value = record_or_msg.key(), record_or_msg.value()
        log.warning("dead-letter %s[%d]@%d: %s", topic, part, off, reason[:500])
        # The letter must itself fit in a message: an oversize original is kept in part.
        room = self.max_bytes // 2
        if value is not None and len(value) > room:
            reason = f"{reason} (value truncated from {len(value):,} bytes)"
            value = value[:room]
        if key is not None and len(key) > 1024:
            key = key[:1024]
        dl = {
            "source_topic": topic,
            "partition": part,
            "offset": off,
            "key": key,
            "value": value,
            "stage": self.stage,
            "reason": reason[:10_000],
            "timestamp_ms": now_ms(),
        }
        self.emit("dead-letters", topic, "peloton.DeadLetter", dl)
        self.dead_lettered += 1
        metrics.DEAD_LETTERS.labels(self.stage, kind).inc()

    def flush(self, timeout: float = 30.0) -> None:
        self.send()
        if self.producer is None:  # a transaction's output is flushed by its commit
            raise RuntimeError("flush() of an Emitter without a producer: its transaction's commit flushes")
        remaining = self.producer.flush(timeout)
        if remaining:
            raise DeliveryError(f"{remaining} messages not delivered to the broker within {timeout:g}s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise DeliveryError("delivery failed: " + "; ".join(errors[:5]))


class RecordingEmitter(Emitter):
    """An Emitter with no broker behind it, for unit tests of stages: what a handler emitted and
    the runtime would have sent is in `sent`, decoded, as (topic id, key, schema, value), each
    record of a bundle alone; `messages` has (topic id, schema) of each message it went in."""

    def __init__(self, stage: str = "test", catalogue: Catalogue | None = None, max_bytes: int = 1_000_000):
        super().__init__(None, catalogue or Catalogue(), registry(), stage, max_bytes)
        self.sent: list[tuple[str, str | None, str, dict]] = []  # key None: an empty key
        self.messages: list[tuple[str, str]] = []

    def send(self) -> None:
        for topic, key, value, _partition in self._messages():
            schema, decoded = self.serde.decode(value)
            self.messages.append((self.catalogue.by_name[topic].id, schema))
            item, values = unbundle(schema, decoded)
            self.sent.extend((self.catalogue.by_name[topic].id, key.decode() if key else None, item, v) for v in values)
            self.produced += 1

    def flush(self, timeout: float = 30.0) -> None:
        self.send()

    def take(self, topic: str | None = None, schema: str | None = None) -> list[tuple[str, str | None, str, dict]]:
        """What was sent (to one topic, of one schema, if given) since the last take."""
        self.send()

        def wanted(s: tuple) -> bool:
            return (topic is None or s[0] == topic) and (schema is None or s[2] == schema)
        out = [s for s in self.sent if wanted(s)]
        self.sent = [s for s in self.sent if not wanted(s)]
        return out
