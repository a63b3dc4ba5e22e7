"""The consumer lag a stage instance exports for the partitions it owns (kafka_consumergroup_lag
and _seconds, and the records it holds), as Burrow and the Kafka exporter name them."""

from __future__ import annotations

import contextlib
import time
from collections import deque

from confluent_kafka import Consumer, KafkaException, TopicPartition

from peloton import metrics
from peloton.topics import Catalogue

Partition = tuple[str, int]  # (topic id, partition)
Labels = tuple[str, str, str]  # (group, topic, partition)


def export_lag(consumer: Consumer, catalogue: Catalogue, group: str, assigned: set[Partition],
               committed: dict[Partition, tuple[int, int]], handled: dict[Partition, int],
               read_times: dict[Partition, deque[tuple[int, int]]], shown_before: set[Labels]) -> set[Labels]:
    """Each owned partition's lag: the log end from the last fetch (its high-water mark, as
    ListOffsets would say without a round trip), the committed offset (else the next to commit,
    `handled`), and the produce time of the first message read at or before it. The series of
    partitions given away since `shown_before` go (their owner reports them now). The labels shown."""
    now_s = time.time()
    shown = set()
    for tp in assigned:
        name = catalogue[tp[0]].name
        try:
            _low, end = consumer.get_watermark_offsets(TopicPartition(name, tp[1]), cached=True)
        except KafkaException:
            continue
        # Before this instance's first commit on a partition, what it handled stands in for it;
        # a partition with nothing in it has no lag whoever committed what.
        at = committed[tp][0] if tp in committed else handled.get(tp, 0 if end == 0 else None)
        if end < 0 or at is None:
            continue
        lag = max(0, end - at)
        seen = [ts for off, ts in read_times.get(tp, ()) if off <= at and ts > 0]
        age = max(0.0, now_s - seen[-1] / 1000) if lag and seen else 0.0
        labels = (group, name, str(tp[1]))
        metrics.LAG.labels(*labels).set(lag)
        metrics.LAG_SECONDS.labels(*labels).set(round(age, 3))
        metrics.HELD.labels(*labels).set(max(0, min(handled.get(tp, at), end) - at))
        shown.add(labels)
    for labels in shown_before - shown:
        for gauge in (metrics.LAG, metrics.LAG_SECONDS, metrics.HELD):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)
    return shown
