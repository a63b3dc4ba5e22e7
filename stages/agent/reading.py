"""Where an agent starts reading its commands partitions."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from peloton.host.driver import now_ms

if TYPE_CHECKING:
    from confluent_kafka import Consumer, TopicPartition

log = logging.getLogger("peloton.agent")


def start_position(consumer: Consumer, topic: str, partition: int, saved: object) -> tuple[TopicPartition, int | None]:
    """Where to read a commands partition from, and, when from its end, since when (ms since the
    epoch) commands count. After a restart, go on from the last command handled (`saved`):
    launches and kills sent while the agent was away are still its own. On a first start, only
    what comes from now on."""
    from confluent_kafka import OFFSET_END, TopicPartition

    offset = saved if isinstance(saved, int) else OFFSET_END
    if offset != OFFSET_END:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        if offset > end:  # the cluster was wiped or the topic deleted: nothing past its end comes
            log.warning("saved offset %d is past the end (%d) of %s[%d]: the broker lost its log; "
                        "reading from its end", offset, end, topic, partition)
            offset = OFFSET_END
    fresh_since_ms = None
    if offset == OFFSET_END:
        # A read_committed reader's end is the last stable offset: a transaction still open
        # may hold commands before it. Nothing sent before this first start can be for the agent
        # (the host manager learns of a host from its reports), so such commands are skipped.
        fresh_since_ms = now_ms()
    return TopicPartition(topic, partition, offset), fresh_since_ms
