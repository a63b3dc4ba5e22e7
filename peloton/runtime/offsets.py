"""The offsets a stage instance keeps per (topic id, partition): the next to commit once what was
read is handled, what its last commit stored, and what it ever committed (so that a group whose
offsets are all gone tells of a lost log). Offsets to commit never pass a record the stage holds;
the commit's metadata then says how far it has read (`read=N`) for lag tools."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from peloton.topics import Catalogue

log = logging.getLogger("peloton.runtime")

Partition = tuple[str, int]  # (topic id, partition)


class OffsetBook:
    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self.next: dict[Partition, int] = {}  # next offset to commit
        self.committed: dict[Partition, tuple[int, int]] = {}  # what the last commit stored: (offset, read)
        self.ever_committed: dict[Partition, int] = {}  # kept across rebalances (wiped)

    def to_commit(self, held: dict[Partition, int], assigned: set[Partition]) -> list[TopicPartition]:
        """What was handled and not committed yet, held records excepted."""
        offsets = []
        for tp, nxt in self.next.items():
            target = min(nxt, held[tp]) if tp in held else nxt
            if self.committed.get(tp) != (target, nxt) and tp in assigned:
                metadata = f"read={nxt}" if target < nxt else ""
                offsets.append(TopicPartition(self.catalogue[tp[0]].name, tp[1], target, metadata=metadata))
        return offsets

    def remember(self, stored: list[TopicPartition]) -> None:
        """What a commit stored, and in ever_committed what a wiped log would have forgotten."""
        for tp in stored:
            key = (self.catalogue.by_name[tp.topic].id, tp.partition)
            read = int(tp.metadata[5:]) if tp.metadata and tp.metadata.startswith("read=") else tp.offset
            self.committed[key] = (tp.offset, read)
            if read > 0:
                self.ever_committed[key] = tp.offset

    def forget(self, ids: Iterable[Partition]) -> None:
        for tp in ids:
            self.next.pop(tp, None)
            self.committed.pop(tp, None)

    def wiped(self, consumer: Consumer) -> bool:
        """True when the group has no committed offset left for any partition this instance once
        committed to. Apache Kafka keeps offsets with its log; they all go at once only when the
        cluster was wiped, or an operator deleted the topics (which deletes their offsets)."""
        if not self.ever_committed:
            return False
        try:
            parts = [TopicPartition(self.catalogue[t].name, p) for t, p in self.ever_committed]
            if any(tp.offset >= 0 for tp in consumer.committed(parts, timeout=10)):
                return False
        except KafkaException as exc:
            log.warning("could not read committed offsets: %s", exc)
            return False
        self.ever_committed.clear()
        self.committed.clear()
        return True

    def past_markers(self, read: list[TopicPartition], carried: set[Partition]) -> None:
        """The consumer's positions (`read`) move what is committed past transactions' commit
        markers, each an offset of its own after its transaction's last record; not where
        messages read are carried to the next turn (the position is past them)."""
        for tp in read:
            key = (self.catalogue.by_name[tp.topic].id, tp.partition)
            if tp.offset >= 0 and tp.offset > self.next.get(key, -1) and key not in carried:
                self.next[key] = tp.offset

    def handled_to(self, topic: str, ends: dict[int, int]) -> bool:
        """Whether every record before these ends (partition -> offset) of the topic was handled."""
        return all(self.next.get((topic, p), 0) >= end for p, end in ends.items())
