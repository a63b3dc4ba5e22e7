"""Reading back what a topic holds, committed, since a time: how a new owner of a partition learns
which of its predecessor's decisions already went out.

A stage that decides in the store and sends in a Kafka transaction has two writes that cannot be
one: killed between them, it leaves decisions the store calls unsent that Kafka may hold. The new
owner reads the output partitions from a little before the oldest such decision up to their end
as it is now (the high-water mark, so a transaction the dead owner left open is waited for until
it is aborted or committed), and sends again only what is not there.
"""

from __future__ import annotations

import logging
import time
import uuid

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from peloton.config import Settings
from peloton.runtime.clients import kafka_access
from peloton.serde import DecodeError, registry, unbundle
from peloton.topics import Catalogue

log = logging.getLogger("peloton.readback")

# Record times come from the producer's clock, stored times from the store's: a margin for both.
CLOCK_MARGIN_MS = 5_000


def offsets_at(admin: AdminClient, parts: list[tuple[str, int]], spec: OffsetSpec, timeout_s: float,
               isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> dict[tuple[str, int], int]:
    """Per (topic name, partition), the offset ListOffsets answers for `spec` (latest(): the
    high-water mark, or with READ_COMMITTED the last stable offset; for_timestamp(ms): the first
    record at or after that time, -1 if none). A partition not answered within timeout_s is left
    out."""
    if not parts:
        return {}
    try:
        futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in parts}, isolation_level=isolation,
                                     request_timeout=timeout_s)
    except KafkaException:
        return {}
    out = {}
    # One wait for all: a client that answers nothing would otherwise cost the caller's loop the
    # whole wait once per partition.
    deadline = time.monotonic() + timeout_s + 1
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = future.result(timeout=max(0.0, deadline - time.monotonic())).offset
        except (KafkaException, TimeoutError):
            continue
    return out


def committed_since(settings: Settings, catalogue: Catalogue, topic: str, partitions: list[int], since_ms: int,
                    timeout_s: float) -> list[tuple[str, dict]] | None:
    """Every committed item (schema, value; bundles opened) on the partitions from `since_ms` to
    their current end, or None when the broker did not let that be read within timeout_s."""
    if not partitions:
        return []
    name = catalogue[topic].name
    deadline = time.monotonic() + timeout_s
    admin = AdminClient(kafka_access(settings))
    parts = [(name, p) for p in partitions]
    ask = max(1.0, timeout_s / 2)
    ends = {p: o for (_, p), o in offsets_at(admin, parts, OffsetSpec.latest(), ask).items()}
    starts = {p: o for (_, p), o in offsets_at(
        admin, parts, OffsetSpec.for_timestamp(max(0, since_ms - CLOCK_MARGIN_MS)), ask).items()}
    if len(ends) < len(parts) or len(starts) < len(parts):
        log.warning("could not read back %s: the broker did not say where its partitions start and end", name)
        return None
    # No record at or after the time: the partition's end (nothing to read there).
    starts = {p: (o if o >= 0 else ends[p]) for p, o in starts.items()}
    wanted = {p for p in partitions if starts[p] < ends[p]}
    if not wanted:
        return []
    consumer = Consumer({**kafka_access(settings), "group.id": f"{catalogue.prefix}peloton.readback."
                         f"{uuid.uuid4().hex[:8]}", "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    serde = registry()
    items: list[tuple[str, dict]] = []
    try:
        consumer.assign([TopicPartition(name, p, starts[p]) for p in wanted])
        while wanted and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.2):
                if m.error() is None:
                    try:
                        schema, values = unbundle(*serde.decode(m.value()))
                    except DecodeError:
                        continue  # not ours to judge here; the readers of the topic dead-letter it
                    items.extend((schema, v) for v in values)
            # A read_committed position passes aborted records and markers only once their
            # transaction has ended: reaching the end as it was means every open one has.
            for tp in consumer.position([TopicPartition(name, p) for p in wanted]):
                if tp.offset >= ends[tp.partition]:
                    wanted.discard(tp.partition)
    finally:
        consumer.close()
    return None if wanted else items
