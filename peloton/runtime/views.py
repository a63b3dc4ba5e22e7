"""Views: the last value per key of a compacted topic, kept by every instance that reads it
(faust's table, read-only), and a hand-fed one for unit tests."""

from __future__ import annotations

import logging
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from peloton.config import Settings
from peloton.runtime.clients import CONSUMER_RECOVERY, QUIET, VIEW_FETCH_WAIT_MS, kafka_access
from peloton.runtime.stall import EndsAside, ReaderWatch
from peloton.serde import DecodeError, registry
from peloton.topics import Catalogue

log = logging.getLogger("peloton.runtime")
_REFUSED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}


class CompactedView:
    """Last value per key of a compacted topic, read in full by every instance (faust-table style).

    It reads what compaction left (one record per key, plus the open segment) and keeps the latest
    per key, as any reader of a compacted Kafka topic must."""

    def __init__(self, settings: Settings, topic: str, catalogue: Catalogue | None = None, quiet: bool = False,
                 head: tuple[str, str] | None = None):
        self.catalogue = catalogue or Catalogue(settings.topic_prefix)
        self.spec = self.catalogue[topic]
        self.serde = registry()
        # (schema, field): a reader that needs that schema's fields up to the one named keeps
        # only those, and reads no further (SchemaRegistry.head_decoder).
        self._decode = self.serde.head_decoder(*head) if head else self.serde.decode
        self.values: dict[str, dict] = {}
        self._said_refused = False
        self._config = {
            **kafka_access(settings),
            "group.id": f"{self.catalogue.prefix}peloton.view.{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            # A broker that restarted empty starts the topic again at 0: read it from there.
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": VIEW_FETCH_WAIT_MS,
            **CONSUMER_RECOVERY,
            **(QUIET if quiet else {}),
        }
        self.consumer = Consumer(self._config)
        self.consumer.assign([TopicPartition(self.spec.name, p, OFFSET_BEGINNING) for p in range(self.spec.partitions)])
        self.reader = ReaderWatch(self.spec.name, list(range(self.spec.partitions)), EndsAside(kafka_access(settings)))

    def poll(self, timeout: float = 0.0, max_messages: int = 5000) -> list[tuple[str, dict]]:
        """Read what has arrived: every (key, value) in order; `values` keeps the latest per key."""
        self._check_reader()
        changes: list[tuple[str, dict]] = []
        while True:
            msgs = self.consumer.consume(max_messages, timeout)
            if not msgs:
                return changes
            for m in msgs:
                err = m.error()
                if err is not None:
                    self._refused(err)
                    continue
                raw_key = m.key()
                if raw_key is None:
                    continue
                try:
                    _, value = self._decode(m.value())
                except DecodeError:
                    log.warning("skipping undecodable record on %s@%d", self.spec.name, m.offset())
                    continue
                key = raw_key.decode()
                self.values[key] = value
                changes.append((key, value))
            timeout = 0.0

    def _check_reader(self) -> None:
        """A consumer that stopped fetching while records waited is replaced (peloton/runtime/
        stall.py): the new one goes on from where the old one was, values kept."""
        stalled = self.reader.stalled(self.consumer)
        if not stalled:
            return
        self.consumer, at = self.reader.renew(self.consumer, lambda: Consumer(self._config),
                                              otherwise=OFFSET_BEGINNING)
        log.warning("the reader of %s fetched nothing for %gs while records waited on partitions %s: a new "
                    "consumer goes on from offsets %s", self.spec.name, self.reader.rule.after_s, stalled, at)

    def _refused(self, err: KafkaError) -> None:
        """Said once, loudly: a view its user may not read stays empty, and what depends on it
        waits (a missing ACL looks like an idle cluster otherwise)."""
        if err.code() in _REFUSED and not self._said_refused:
            self._said_refused = True
            log.error("cannot read %s: %s; this process's Kafka user (PELOTON_KAFKA_USER) needs READ on it "
                      "(`pelotonctl topics acls` lists what each component needs)", self.spec.name, err.str())

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
        self.reader.renewed()

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
