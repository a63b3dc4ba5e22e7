"""Which broker coordinates a consumer group or a transactional id, so that a failure test or a
bench can pick a name whose coordinator is the node it will kill (the worst case for a client)."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient


def java_hash(text: str) -> int:
    """String.hashCode, which Kafka reduces to a coordinator's partition."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinated_by(admin: AdminClient, topic: str, node: int, prefix: str) -> str:
    """A name (prefix-N) whose coordinator is `node`: Kafka coordinates a group or a transactional
    id from the partition abs(hashCode) mod the partition count of __consumer_offsets or
    __transaction_state, on that partition's leader. Names with a non-negative hash only, where
    every way Kafka has written abs agrees."""
    led: set[int] = set()
    partitions: dict = {}
    for _ in range(100):
        partitions = admin.list_topics(topic=topic, timeout=10).topics[topic].partitions
        led = {p for p, meta in partitions.items() if meta.leader == node}
        # Every partition listed, or the count the hash is reduced by is wrong: a bench trial
        # just after a node's restart found no name at all for the partitions it was shown.
        if led and sorted(partitions) == list(range(len(partitions))):
            break
        time.sleep(0.2)  # made at the first use of a group or transaction, leaders chosen just after
    else:
        raise RuntimeError(f"node {node} leads no partition of {topic}, or its metadata never listed them all "
                           f"(last seen: partitions {sorted(partitions)}, led by it {sorted(led)})")
    for n in range(100_000):
        name = f"{prefix}-{n}"
        h = java_hash(name)
        if h >= 0 and h % len(partitions) in led:
            return name
    raise RuntimeError(f"no name for {topic} on node {node}")
