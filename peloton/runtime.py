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
from collections import Counter, deque
from dataclasses import dataclass
from typing import Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from peloton import metrics
from peloton.config import Settings
from peloton.model.events import task_errors
from peloton.serde import BUNDLES, DecodeError, SchemaRegistry, registry, unbundle
from peloton.store import STORE_UNAVAILABLE
from peloton.topics import Catalogue, partition_for
from peloton.transaction import BatchTransaction, TransactionError

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
    raw_value: bytes | None  # for an item of a bundle, the whole bundle
    index: int = -1  # the item's place in its bundle (serde.BUNDLES); -1: the message was this record alone


# For every client that lives as long as its process (a stage's, an agent's, a view's, the lag
# sampler's): what brings it back after the brokers went away.
RECOVERY = {
    # Try a lost broker again at least every second (the Java client's default; librdkafka's is
    # 10 s). librdkafka looks a coordinator up again only when its connection attempt fails: with
    # the backoff doubling to 10 s, a stage whose transaction coordinator died learned its
    # successor 3 s after the election (measured), and its batch waited that long.
    "reconnect.backoff.max.ms": 1000,
    # A broker in controlled shutdown can answer metadata with no brokers at all; librdkafka
    # then forgets every broker it knew and, with the default (5 min), bootstraps again only
    # after 5 minutes without metadata: after a whole-cluster restart, launch and place sat
    # without partitions long after the brokers were back (seen in the three-broker test).
    "metadata.recovery.rebootstrap.trigger.ms": 5000,
}


def producer_config(settings: Settings, transactional_id: str | None = None) -> dict:
    """A producer's settings. With a transactional id: the producer of a stage instance, whose
    output and consumed offsets commit together (peloton.transaction)."""
    config = {
        "bootstrap.servers": settings.bootstrap,
        # Every in-sync replica has a message before it counts as sent (min.insync.replicas of the
        # topic decides how many must be in sync), and retries never write it twice.
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "compression.type": "none",
        # Small requests go at once rather than waiting on Nagle and the peer's delayed ack.
        "socket.nagle.disable": True,
        # Java-compatible key hashing, so other producers land keys on the same partitions.
        "partitioner": "murmur2_random",
        # Never give up on a message while the broker is away: a message that timed out would be
        # lost after its batch's offsets were committed. flush() reports the wait instead.
        "message.timeout.ms": 0,
        "message.max.bytes": settings.max_message_bytes + MESSAGE_OVERHEAD,
        # Topics come from topics.yaml only: one a client made would have the broker's default
        # partition count, and keys would land where no stage looks for them.
        "allow.auto.create.topics": False,
        **RECOVERY,
        **_debug(settings),
    }
    if transactional_id:
        timeout_ms = int(settings.transaction_timeout_s * 1000)
        config.update({
            "transactional.id": transactional_id,
            # How long a transaction left open by a killed instance holds back its readers
            # (read_committed) before the coordinator aborts it; a restart under the same id
            # aborts it at once. A message may not outlive its transaction.
            "transaction.timeout.ms": timeout_ms,
            "message.timeout.ms": timeout_ms,
            # The coordinator answers CONCURRENT_TRANSACTIONS while it finishes the previous
            # transaction: the default 100 ms backoff made every batch wait that long.
            "retry.backoff.ms": 10,
            "retry.backoff.max.ms": 100,
        })
    return config


def _debug(settings: Settings) -> dict:
    return {"debug": settings.kafka_debug} if settings.kafka_debug else {}


# Room for the key, headers and batch framing on top of a record's value.
MESSAGE_OVERHEAD = 4096


class BrokerUnavailable(RuntimeError):
    """The broker did not answer in time (a command line says so in one line, exit 5)."""


class DeliveryError(RuntimeError):
    """Produced messages did not reach the broker (yet): the broker is away or refused them."""


class RecordError(ValueError):
    """The record being handled cannot be used; it goes to the dead-letter topic with this reason."""


class RecordTooLarge(RecordError):
    """What a record would make is larger than the broker accepts."""


def is_transient(exc: BaseException) -> bool:
    """A failure that is not the record's fault: the broker or the store is unavailable. The
    batch is tried again after a pause instead of being dead-lettered."""
    if isinstance(exc, (DeliveryError, TransactionError, *STORE_UNAVAILABLE)):
        return True
    if isinstance(exc, KafkaException):
        err = exc.args[0] if exc.args else None
        code = err.code() if isinstance(err, KafkaError) else None
        return code not in _RECORD_KAFKA_ERRORS
    return False


_RECORD_KAFKA_ERRORS = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE, KafkaError._INVALID_ARG,
                        KafkaError._MSG_TIMED_OUT}


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

    def _on_delivery(self, err, msg) -> None:
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
        for topic, key, value, partition in self._messages():
            if self.transaction is not None:
                self.transaction.produce(topic, key, value, partition, None)
                self.produced += 1
                continue
            while True:
                try:
                    self.producer.produce(topic, value=value, key=key, partition=partition,
                                          on_delivery=self._on_delivery)
                    break
                except BufferError:  # local queue full: let librdkafka drain, then retry
                    self.producer.poll(0.05)
            self.produced += 1

    def dead_letter(self, record_or_msg, reason: str, kind: str = "refused") -> None:
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
        else:
            topic, part, off = record_or_msg.topic(), record_or_msg.partition(), record_or_msg.offset()
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
        self.sent: list[tuple[str, str, str, dict]] = []
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

    def take(self, topic: str | None = None, schema: str | None = None) -> list[tuple[str, str, str, dict]]:
        """What was sent (to one topic, of one schema, if given) since the last take."""
        self.send()

        def wanted(s: tuple) -> bool:
            return (topic is None or s[0] == topic) and (schema is None or s[2] == schema)
        out = [s for s in self.sent if wanted(s)]
        self.sent = [s for s in self.sent if not wanted(s)]
        return out


class Stage:
    """A stage's logic as the runtime sees it. Subclasses override what they need.

    handle() may raise: the runtime then finds the record at fault, dead-letters it and goes on.
    It must therefore be safe to call again with records it has seen (every handler is idempotent
    anyway, for at-least-once delivery), and it should emit only through `self.emit`, whose
    output the runtime discards when the handler fails."""

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

    def caught_up(self, topic: str, partitions: list[int]) -> bool:
        """Whether this instance has handled all that was written to these partitions of its
        input until now (the runtime asks the broker; alone, in unit tests, it always has)."""
        return True

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


class WrongSchema(ValueError):
    """A message of a schema its topic does not carry."""


def decode_message(serde: SchemaRegistry, spec, partition: int, offset: int, raw_key: bytes | None,
                   raw_value: bytes | None) -> list[Record]:
    """The records of one message: itself, or each record of a bundle as if it came alone.
    Raises DecodeError or WrongSchema."""
    schema, value = serde.decode(raw_value)
    if schema not in spec.value_schemas:
        raise WrongSchema(f"schema {schema} is not allowed on {spec.id} (allowed: {', '.join(spec.value_schemas)})")
    key = raw_key.decode("utf-8", "replace") if raw_key is not None else None
    item, values = unbundle(schema, value)
    if item == schema:
        return [Record(spec.id, partition, offset, key, schema, value, raw_key, raw_value)]
    return [Record(spec.id, partition, offset, key, item, v, raw_key, raw_value, i) for i, v in enumerate(values)]


# fetch.wait.max.ms of a stage's consumer and of a view's (see StageRuntime's consumer). A view
# reads state that changes now and then (hosts, pool usage): it can wait longer.
FETCH_WAIT_MS = 100
VIEW_FETCH_WAIT_MS = 250


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
                # How long the broker holds a fetch that finds nothing: every idle consumer asks
                # again this often. Data that arrives ends the wait early.
                "fetch.wait.max.ms": FETCH_WAIT_MS,
                # Only what committed: the output of an aborted or still open transaction is
                # never handled (librdkafka's default, said here because it is the guarantee).
                "isolation.level": "read_committed",
                "socket.nagle.disable": True,
                "allow.auto.create.topics": False,  # see producer_config
                # Notice topics made again (after a broker lost them) within seconds, not minutes.
                "topic.metadata.refresh.interval.ms": int(settings.topic_check_s * 1000),
                **RECOVERY,
                **_debug(settings),
            }
        )
        self.transaction: BatchTransaction | None = None
        if settings.exactly_once:
            # One id per instance: a restarted instance fences its predecessor and aborts what
            # it left open. Zombies of a rebalance are fenced by the group (KIP-447).
            txn_id = f"{self.catalogue.group(stage.name)}.{self.instance_id}"
            self.transaction = BatchTransaction(lambda: Producer(producer_config(settings, txn_id)),
                                                settings.transaction_timeout_s)
            self.producer = None  # the transaction's own, replaced after a failed attempt
        else:
            self.producer = Producer(producer_config(settings))
        self.emitter = Emitter(self.producer, self.catalogue, self.serde, stage.name, settings.max_message_bytes,
                               self.transaction)
        stage.bind(self.emitter, settings, self.catalogue)
        stage.caught_up = self.caught_up
        self._next: dict[tuple[str, int], int] = {}  # next offset to commit, per (topic id, partition)
        # What the last commit stored per partition: (offset, how far read) -- they differ where a
        # record is held, and the commit's metadata carries the second for lag tools.
        self._committed: dict[tuple[str, int], tuple[int, int]] = {}
        # (offset, produce time ms) of recent messages read per partition, for lag in seconds
        self._read_times: dict[tuple[str, int], deque] = {}
        self._lag_labels: set[tuple[str, str, str]] = set()
        self._next_lag_export = 0.0
        self.metrics_address = metrics.serve(settings)
        self.assigned: set[tuple[str, int]] = set()
        self.batches = 0
        self.records = 0
        self.failed_records = 0  # handled alone, raised, dead-lettered
        self.retries = 0  # pauses for an unavailable broker or store
        self.recoveries = 0  # times the broker was found to have lost everything
        # Offsets this instance committed, kept across rebalances: if the group's committed
        # offsets are all gone at the next assignment, the log was lost (see _on_assign).
        self._ever_committed: dict[tuple[str, int], int] = {}
        self._next_topic_check = 0.0
        self._topics_checked = False
        self._admin = None
        self._consume_errors = 0
        self._per_message = 1.0  # records per message read lately (bundles hold many)
        self.registry = self._register()

    def _register(self):
        from peloton.registry import join

        return join(self.settings.zookeeper, self.stage.name, self.instance_id, {
            "group": self.catalogue.group(self.stage.name), "partitions": [], "metrics": self.metrics_address})

    def _registry_partitions(self) -> None:
        if self.registry is not None:
            self.registry.update({"partitions": sorted(self.assigned)})

    # -- rebalance ------------------------------------------------------------------------
    def _ids(self, partitions: Iterable[TopicPartition]) -> list[tuple[str, int]]:
        return [(self.catalogue.by_name[tp.topic].id, tp.partition) for tp in partitions]

    def _on_assign(self, consumer, partitions) -> None:
        ids = self._ids(partitions)
        self.assigned.update(ids)
        log.info("%s assigned %s", self.instance_id, ids)
        self._registry_partitions()
        wiped = bool(ids) and self._offsets_wiped()
        self._until_done(lambda: self.stage.on_assign(ids), "taking over partitions")
        if wiped:
            log.warning("%s: every offset this instance committed is gone: the broker lost its log "
                        "(restarted empty?); sending again from the store what may be lost", self.instance_id)
            self.recoveries += 1
            for view in self.stage.views():
                view.rewind()
            self._until_done(self.stage.recover, "recovering after the broker lost its log")

    def _offsets_wiped(self) -> bool:
        """True when the group has no committed offset left for any partition this instance once
        committed to. Apache Kafka keeps offsets with its log; they all go at once only when the
        cluster was wiped, or an operator deleted the topics (which deletes their offsets)."""
        if not self._ever_committed:
            return False
        try:
            parts = [TopicPartition(self.catalogue[t].name, p) for t, p in self._ever_committed]
            if any(tp.offset >= 0 for tp in self.consumer.committed(parts, timeout=10)):
                return False
        except KafkaException as exc:
            log.warning("could not read committed offsets: %s", exc)
            return False
        self._ever_committed.clear()
        self._committed.clear()
        return True

    def _on_revoke(self, consumer, partitions) -> None:
        ids = self._ids(partitions)
        # Everything handled so far is flushed and committed at the end of each loop, so the next
        # owner starts exactly after it; only held messages are read again.
        try:
            self._flush_and_commit()
        except Exception as exc:  # the next owner redoes what was not committed
            log.warning("commit before giving up partitions failed: %s", exc)
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
            self._read_times.pop(tp, None)
        log.info("%s %s %s", self.instance_id, how, ids)
        self._registry_partitions()
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
        if time.monotonic() >= self._next_topic_check:
            self._next_topic_check = time.monotonic() + self.settings.topic_check_s
            self._check_topics()
        # A batch of about max_batch records, however many come bundled in one message.
        msgs = self.consumer.consume(max(1, int(self.settings.max_batch / self._per_message)),
                                     self.settings.poll_timeout_s)
        records, positions = self._decode(msgs) if msgs else ([], {})
        if records and not self._until_done(lambda: self._handle(records), "handling a batch"):
            return  # stopping before the batch was handled: none of it is committed
        self._next.update(positions)
        self._past_markers()
        self.stage_tick()
        if not self._until_done(self._flush_and_commit, "committing"):
            return
        if time.monotonic() >= self._next_lag_export:
            self._next_lag_export = time.monotonic() + self.settings.metrics_period_s
            self._export_lag()

    def _past_markers(self) -> None:
        """A transaction's commit marker takes an offset of its own after its last record. The
        consumer's position moves past markers as it reads them; so does what is committed
        (every record before the position was handled), or each partition written in
        transactions would show a lag of 1 for ever, here and in kafka-consumer-groups."""
        if not self.assigned:
            return
        parts = [TopicPartition(self.catalogue[t].name, p) for t, p in self.assigned]
        try:
            read = self.consumer.position(parts)
        except KafkaException:
            return
        for tp in read:
            key = (self.catalogue.by_name[tp.topic].id, tp.partition)
            if tp.offset >= 0 and tp.offset > self._next.get(key, -1):
                self._next[key] = tp.offset

    def caught_up(self, topic: str, partitions: list[int], timeout: float = 1.0) -> bool:
        """True when every record written to these partitions so far (their high-water marks, asked
        of the broker now) has been handled here; False when behind, or the broker does not answer."""
        if not partitions:
            return True
        from peloton.readback import offsets_at

        name = self.catalogue[topic].name
        ends = offsets_at(self._admin_client(), [(name, p) for p in partitions], OffsetSpec.latest(), timeout)
        if len(ends) < len(partitions):  # the broker is away or slow: nothing can be said yet
            return False
        self._past_markers()
        return all(self._next.get((topic, p), 0) >= end for (_, p), end in ends.items())

    def _admin_client(self):
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.settings.bootstrap, **RECOVERY})
        return self._admin

    def _check_topics(self) -> None:
        """At start, check every topic against topics.yaml and say what differs; later, make
        again any topic that is gone (an operator deleted it, or the cluster was wiped):
        consumers would wait for it for ever, and produced messages would fail."""
        from peloton.topics import apply_topics

        first = not self._topics_checked
        if not first:
            try:
                present = self.consumer.list_topics(timeout=2).topics
            except KafkaException:
                return  # the broker is away; the loop waits for it
            missing = [t.name for t in self.catalogue if t.name not in present]
            if not missing:
                return
            log.warning("topics missing on the broker (deleted, or the cluster was wiped?): %s; making them "
                        "from topics.yaml", ", ".join(missing))
        try:
            report = apply_topics(self._admin_client(), self.catalogue, fix=False)
        except Exception as exc:  # the broker is away, or another instance is making them too
            log.warning("could not check the topics: %s", exc)
            return
        self._topics_checked = True
        for row in report:
            if row["status"] not in ("ok", "created"):
                log.warning("topic %s %s (topics.yaml; `pelotonctl topics apply` sets it)", row["topic"], row["status"])

    def stage_tick(self) -> None:
        # What a tick emits is kept to leave in bundles, and sent even if the tick then fails (as
        # if each record had gone at once: a tick records what it sent before it sends it).
        self.emitter.holding = True
        try:
            self.stage.tick(time.monotonic())
        except Exception as exc:
            if is_transient(exc):
                log.warning("tick: %s (tried again next loop)", exc)
            else:  # a bug, not input: say so loudly, and keep serving
                log.exception("tick failed; the stage goes on")
        finally:
            self.emitter.holding = False
            self.emitter.send()

    def _handle(self, records: list[Record]) -> None:
        started = time.perf_counter()
        self.failed_records += handle_batch(self.stage, records, self.emitter)
        metrics.BATCH_SECONDS.labels(self.stage.name).observe(time.perf_counter() - started)
        metrics.BATCH_RECORDS.labels(self.stage.name).observe(len(records))
        by_topic = Counter(r.topic for r in records)
        for topic, n in by_topic.items():
            metrics.RECORDS.labels(self.stage.name, topic).inc(n)
        self.records += len(records)
        self.batches += 1

    def _export_lag(self) -> None:
        """kafka_consumergroup_lag and _seconds for the partitions this instance owns: the log end
        from the last fetch (its high-water mark, as ListOffsets would say without a round trip),
        the committed offset, and the produce time of the first message read at or before it."""
        group = self.catalogue.group(self.stage.name)
        now_s = time.time()
        shown = set()
        for tp in self.assigned:
            name = self.catalogue[tp[0]].name
            try:
                _low, end = self.consumer.get_watermark_offsets(TopicPartition(name, tp[1]), cached=True)
            except KafkaException:
                continue
            # Before this instance's first commit on a partition, what it handled stands in for it;
            # a partition with nothing in it has no lag whoever committed what.
            committed = self._committed[tp][0] if tp in self._committed else self._next.get(tp, 0 if end == 0 else None)
            if end < 0 or committed is None:
                continue
            lag = max(0, end - committed)
            seen = [ts for off, ts in self._read_times.get(tp, ()) if off <= committed and ts > 0]
            age = max(0.0, now_s - seen[-1] / 1000) if lag and seen else 0.0
            labels = (group, name, str(tp[1]))
            metrics.LAG.labels(*labels).set(lag)
            metrics.LAG_SECONDS.labels(*labels).set(round(age, 3))
            metrics.HELD.labels(*labels).set(max(0, min(self._next.get(tp, committed), end) - committed))
            shown.add(labels)
        for labels in self._lag_labels - shown:  # partitions given away: their owner reports them now
            for gauge in (metrics.LAG, metrics.LAG_SECONDS, metrics.HELD):
                try:
                    gauge.remove(*labels)
                except KeyError:
                    pass
        self._lag_labels = shown

    def _until_done(self, step, what: str) -> bool:
        """Run step; while the broker or the store is unavailable, pause and try again (backing off
        up to retry_max_s) instead of exiting. False when asked to stop before it succeeded."""
        delay = self.settings.retry_min_s
        while True:
            try:
                step()
                return True
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self.emitter.discard()
                self.retries += 1
                metrics.RETRIES.labels(self.stage.name).inc()
                log.warning("%s: %s; trying again in %.1fs", what, exc, delay)
            stop_at = time.monotonic() + delay
            while self._running and time.monotonic() < stop_at:
                time.sleep(min(0.1, delay))
            if not self._running:
                return False
            delay = min(delay * 2, self.settings.retry_max_s)

    def _decode(self, msgs) -> tuple[list[Record], dict[tuple[str, int], int]]:
        """Decoded records, and the next offset per partition once they are handled."""
        records = []
        positions: dict[tuple[str, int], int] = {}
        by_name = self.catalogue.by_name
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self._consume_errors += 1
                    if self._consume_errors in (1, 10, 100) or self._consume_errors % 1000 == 0:
                        log.warning("consume error (%d so far): %s", self._consume_errors, err)
                continue
            spec = by_name[m.topic()]
            tp = (spec.id, m.partition())
            if tp not in positions:  # the batch's first message of the partition: its age, for lag seconds
                self._read_times.setdefault(tp, deque(maxlen=64)).append((m.offset(), m.timestamp()[1]))
            positions[tp] = m.offset() + 1
            try:
                records.extend(decode_message(self.serde, spec, m.partition(), m.offset(), m.key(), m.value()))
            except DecodeError as exc:
                self.emitter.dead_letter(m, f"undecodable: {exc}", "undecodable")
            except WrongSchema as exc:
                self.emitter.dead_letter(m, str(exc), "wrong_schema")
        if msgs:  # records per message, for the size of the next poll
            self._per_message = 0.7 * self._per_message + 0.3 * max(1.0, len(records) / len(msgs))
        return records, positions

    def _flush_and_commit(self) -> None:
        """Commit what was handled, never past a held record: in one transaction with the output
        (exactly once), or after the output is flushed (at least once). Raises what is worth
        trying again (the broker away, a transaction to send again)."""
        if self.transaction is not None:
            offsets = self._offsets()
            if self.transaction.commit(offsets, self.consumer.consumer_group_metadata):
                self._remember(offsets)
            return
        self.emitter.flush(self.settings.flush_timeout_s)
        self._commit()

    def _offsets(self) -> list[TopicPartition]:
        """The offsets to commit: what was handled, held records excepted. Where a stage holds a
        record back, the commit's metadata says how far it has read (`read=N`), so lag tools can
        tell held records (read, waiting for room or a host) from a backlog."""
        held = self.stage.held_offsets()
        offsets = []
        for tp, nxt in self._next.items():
            target = min(nxt, held[tp]) if tp in held else nxt
            if self._committed.get(tp) != (target, nxt) and tp in self.assigned:
                metadata = f"read={nxt}" if target < nxt else ""
                offsets.append(TopicPartition(self.catalogue[tp[0]].name, tp[1], target, metadata=metadata))
        return offsets

    def _commit(self) -> None:
        """Commit offsets alone (at least once). A failed commit is not retried: the next loop
        commits newer positions, and whoever owns a partition next reads again from the last commit."""
        offsets = self._offsets()
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            # The group went on without us (a rebalance), or the coordinator is away: whoever owns
            # the partitions next reads again from the last commit. Retrying would only keep us
            # from rejoining.
            log.warning("commit not made (%s); the partitions' next owner reads again from the last commit",
                        err.name() if isinstance(err, KafkaError) else exc)
            return
        self._remember(offsets)

    def _remember(self, stored: list[TopicPartition]) -> None:
        """What a commit stored, per (topic id, partition), and in `ever` what a wiped log would
        have forgotten (_offsets_wiped)."""
        for tp in stored:
            key = (self.catalogue.by_name[tp.topic].id, tp.partition)
            read = int(tp.metadata[5:]) if tp.metadata and tp.metadata.startswith("read=") else tp.offset
            self._committed[key] = (tp.offset, read)
            if read > 0:
                self._ever_committed[key] = tp.offset

    def _shutdown(self) -> None:
        try:
            self._flush_and_commit()
        except Exception:  # still leave the group cleanly; uncommitted work is redelivered
            log.exception("final commit failed")
        self.consumer.close()  # leaves the group so partitions move at once
        self.stage.close()
        if self.transaction is not None:
            self.transaction.close()
        else:
            self.producer.flush(10)
        if self.registry is not None:
            self.registry.close()


# A command line prints its own one-line error; librdkafka's reconnect chatter (one line per
# attempt, every 50 ms) would bury it, so CLI clients log only librdkafka's critical messages.
QUIET = {"log_level": 2}


class CompactedView:
    """Last value per key of a compacted topic, read in full by every instance (faust-table style).

    It reads what compaction left (one record per key, plus the open segment) and keeps the latest
    per key, as any reader of a compacted Kafka topic must."""

    def __init__(self, settings: Settings, topic: str, catalogue: Catalogue | None = None, quiet: bool = False):
        self.catalogue = catalogue or Catalogue(settings.topic_prefix)
        self.spec = self.catalogue[topic]
        self.serde = registry()
        self.values: dict[str, dict] = {}
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap,
                "group.id": f"{self.catalogue.prefix}peloton.view.{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                # A broker that restarted empty starts the topic again at 0: read it from there.
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": VIEW_FETCH_WAIT_MS,
                **RECOVERY,
                **(QUIET if quiet else {}),
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

    def catch_up(self, timeout: float = 5.0) -> bool:
        """Read until every partition is at its high-water mark (False if timeout passed first).

        The mark is taken from fetch responses (cached): no ListOffsets round trip per check."""
        parts = [TopicPartition(self.spec.name, p) for p in range(self.spec.partitions)]
        deadline = time.monotonic() + timeout
        while True:
            self.poll(timeout=0.05)
            positions = {tp.partition: tp.offset for tp in self.consumer.position(parts)}
            behind = False
            for tp in parts:
                try:
                    _low, high = self.consumer.get_watermark_offsets(tp, cached=True)
                except KafkaException:
                    high = -1
                if high < 0 or (high > 0 and positions.get(tp.partition, -1) < high):
                    behind = True
                    break
            if not behind:
                return True
            if time.monotonic() >= deadline:
                return False

    def rewind(self) -> None:
        """Read the topic again from its start, keeping the values read so far (a broker that
        restarted empty serves a new log from 0: a reader past its end would wait there for ever;
        the writers publish every key again, so stale values are replaced)."""
        self.consumer.assign([TopicPartition(self.spec.name, p, OFFSET_BEGINNING) for p in range(self.spec.partitions)])

    def close(self) -> None:
        self.consumer.close()


class StaticView:
    """A CompactedView fed by hand, for unit tests of stages: put() what the topic would hold."""

    def __init__(self, values: dict[str, dict] | None = None):
        self.values: dict[str, dict] = {}
        self._changes: list[tuple[str, dict]] = []
        for key, value in (values or {}).items():
            self.put(key, value)

    def put(self, key: str, value: dict) -> None:
        self.values[key] = value
        self._changes.append((key, value))

    def poll(self, timeout: float = 0.0, max_messages: int = 5000) -> list[tuple[str, dict]]:
        changes, self._changes = self._changes, []
        return changes

    def catch_up(self, timeout: float = 5.0) -> bool:
        return True

    def rewind(self) -> None:
        pass

    def close(self) -> None:
        pass


class HeldOffsets:
    """Messages a stage still holds, per partition, so the runtime commits no further than the
    oldest one. Offsets arrive in order per partition; release may come in any order."""

    def __init__(self):
        self._queues: dict[tuple[str, int], deque[int]] = {}
        # Counted, not a set: the records of one bundle share an offset, each held and released.
        self._released: dict[tuple[str, int], Counter[int]] = {}

    def hold(self, tp: tuple[str, int], offset: int) -> None:
        self._queues.setdefault(tp, deque()).append(offset)

    def release(self, tp: tuple[str, int], offset: int) -> None:
        if tp in self._queues:
            self._released.setdefault(tp, Counter())[offset] += 1

    def drop(self, tp: tuple[str, int]) -> None:
        self._queues.pop(tp, None)
        self._released.pop(tp, None)

    def lowest(self) -> dict[tuple[str, int], int]:
        out = {}
        for tp, q in self._queues.items():
            done = self._released.get(tp)
            while q and done and done[q[0]] > 0:
                offset = q.popleft()
                done[offset] -= 1
                if not done[offset]:
                    del done[offset]
            if q:
                out[tp] = q[0]
        return out
