"""The compacted entitlements topic stays bounded. Entitle publishes every pool's usage once an
entitlement period (a second); the log cleaner keeps the last record per pool, so a view that
starts later (CompactedView) reads about one record per pool plus the active segment (which the
cleaner never compacts), not the whole history.

confluent-kafka 2.16 has no describe_log_dirs, so these tests run a node of their own and read the
partition's size from its log dir, counted as the broker counts it: the bytes of its segments."""

from __future__ import annotations

import re
import time
import uuid

import pytest
import yaml
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, OffsetSpec, ResourceType

from peloton.config import Settings
from peloton.runtime import CompactedView
from peloton.serde import registry
from peloton.topics import TOPICS_FILE, Catalogue, apply_topics
from pelotonctl.dev.kafka import KafkaCluster

pytestmark = pytest.mark.integration

POOLS = 1000
KEYS = [f"/pool-{i:04d}".encode() for i in range(POOLS)]
# Encoding a PoolEntitlement costs ~10 us in Python, which would make the hour's 3.6 M records
# take longer to encode than to send: every period reuses one of a few encodings per pool, and
# only the last period is encoded for itself, so a view can tell it got the last value of each.
VARIANTS = 4
BASE_MS = 1_700_000_000_000


def resources(cpu: float) -> dict:
    return {"cpu": cpu, "mem_mb": cpu * 1024, "disk_mb": cpu * 4096, "gpu": 0.0}


def entitlement(pool: int, period: int) -> bytes:
    """A pool's record as entitle's _publish makes it (every field; no gang waiting)."""
    held = float(period % 8)
    return registry().encode("peloton.PoolEntitlement", {
        "pool": KEYS[pool].decode(),
        "entitlement": resources(8.0),
        "allocation": resources(held),
        "demand": resources(float(pool % 3)),
        "queued_gangs": pool % 3,
        "slack_demand": resources(0.0),
        "non_slack_allocation": resources(held),
        "slack_allocation": resources(0.0),
        "non_slack_entitlement": resources(8.0),
        "slack_entitlement": resources(0.0),
        "reservation": resources(4.0),
        "limit": resources(16.0),
        "preempting": 0,
        "computed_ms": BASE_MS + period * 1000,
        "waiting": [],
    })


def produce(bootstrap: str, topic: str, periods: int, measure) -> tuple[int, int, float, int]:
    """Every pool's record once a period for `periods` periods, as fast as the client sends:
    (records, bytes of keys and values, seconds until the last was acknowledged, the most bytes
    `measure()` found in the partition's segments while they went out, every 60 periods)."""
    variants = [[entitlement(p, v) for p in range(POOLS)] for v in range(VARIANTS)]
    last = [entitlement(p, periods - 1) for p in range(POOLS)]
    key_bytes = sum(map(len, KEYS))
    # The stages' producer settings (idempotent, acks=all, no compression: the bytes on disk
    # are the records' own), with a longer linger for full batches.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "compression.type": "none", "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 500000})
    send = producer.produce
    records = payload = peak = 0
    started = time.monotonic()
    for period in range(periods):
        values = last if period == periods - 1 else variants[period % VARIANTS]
        for key, value in zip(KEYS, values, strict=True):
            while True:
                try:
                    send(topic, value, key, 0)
                    break
                except BufferError:  # the local queue is full: let librdkafka send some
                    producer.poll(0.01)
        producer.poll(0)
        records += POOLS
        payload += key_bytes + sum(map(len, values))
        if period % 60 == 59:
            peak = max(peak, measure())
    assert producer.flush(300) == 0, "records still unsent after 300 s"
    return records, payload, time.monotonic() - started, max(peak, measure())


def end_offset(admin: AdminClient, topic: str) -> int:
    [future] = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()}).values()
    return future.result().offset


def segments(cluster: KafkaCluster, topic: str) -> list[tuple[int, int]]:
    """(base offset, bytes) of each live segment of the topic's partition; the last is active.
    Segments the cleaner replaced wait as *.deleted for file.delete.delay.ms and are not counted."""
    folder = cluster.nodes[0].dir / "data" / f"{topic}-0"
    return sorted((int(f.name[:-4]), f.stat().st_size) for f in folder.glob("*.log"))


def log_bytes(cluster: KafkaCluster, topic: str) -> int:
    return sum(size for _base, size in segments(cluster, topic))


def cleaned_to(cluster: KafkaCluster, topic: str) -> int:
    """The offset up to which the cleaner has compacted the partition (its checkpoint; -1: never)."""
    path = cluster.nodes[0].dir / "data" / "cleaner-offset-checkpoint"
    try:
        lines = path.read_text().splitlines()[2:]  # a version line, a count, then the entries
    except OSError:
        return -1
    for line in lines:
        name, partition, offset = line.split()
        if name == topic and partition == "0":
            return int(offset)
    return -1


def wait_compacted(cluster: KafkaCluster, topic: str, timeout: float) -> float:
    """Seconds until the cleaner has compacted everything up to the active segment, which is all
    it ever compacts (polled; the cleaner looks every log.cleaner.backoff.ms)."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        active = segments(cluster, topic)[-1][0]
        if cleaned_to(cluster, topic) >= active:
            return time.monotonic() - started
        assert time.monotonic() < deadline, (
            f"the cleaner compacted {topic} only to offset {cleaned_to(cluster, topic)} within {timeout:.0f}s, "
            f"the active segment starts at {active}; see {cluster.nodes[0].log}")
        time.sleep(0.2)


def cleaner_seconds(cluster: KafkaCluster, topic: str) -> tuple[int, float]:
    """How many times the broker's cleaner cleaned the partition and its seconds in all (its log)."""
    text = cluster.nodes[0].log.read_text(errors="replace")
    runs = re.findall(rf"cleaned log {re.escape(topic)}-0 .*?\n\s*([\d,.]+) MB of log processed in ([\d,.]+) seconds",
                      text)
    return len(runs), sum(float(seconds.replace(",", "")) for _mb, seconds in runs)


class CountingView(CompactedView):
    """A CompactedView that counts the records it reads (catch_up reads through poll)."""

    read = 0

    def poll(self, timeout: float = 0.0, max_messages: int = 5000):
        changes = super().poll(timeout, max_messages)
        self.read += len(changes)
        return changes


def read_as_a_new_view(bootstrap: str, prefix: str, timeout: float) -> CountingView:
    view = CountingView(Settings(bootstrap=bootstrap, topic_prefix=prefix), "entitlements")
    try:
        assert view.catch_up(timeout), f"a new view did not catch up within {timeout:.0f}s"
    finally:
        view.close()
    return view


def pipeline_topics(admin: AdminClient) -> tuple[str, str]:
    """The catalogue's topics under a prefix of their own, made as `pelotonctl topics apply`
    makes them: (prefix, the entitlements topic's name)."""
    prefix = f"cmp-{uuid.uuid4().hex[:6]}."
    catalogue = Catalogue(prefix)
    apply_topics(admin, catalogue, fix=True)
    return prefix, catalogue["entitlements"].name


def topic_config(admin: AdminClient, topic: str) -> dict[str, str]:
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return {k: e.value for k, e in future.result().items()}


def assert_bounded(cluster: KafkaCluster, admin: AdminClient, prefix: str, topic: str, periods: int,
                   records: int, payload: int, segment_bytes: int) -> dict:
    """What compaction left is one record per pool plus the active segment, on disk and for a
    new reader; returns the figures."""
    left = segments(cluster, topic)
    active_base, active_bytes = left[-1]
    end = end_offset(admin, topic)
    assert end == records, f"the log ends at {end}, {records} records were sent"
    left_bytes = sum(size for _base, size in left)
    cleaned_bytes = left_bytes - active_bytes
    active_records = end - active_base
    # A record on disk is its key and value plus ~20 bytes of framing; twice the payload is ample.
    per_record = payload / records
    assert cleaned_bytes <= 2 * POOLS * per_record, (
        f"{cleaned_bytes:,} bytes in the compacted segments: more than one record per pool")
    assert active_bytes <= segment_bytes
    assert left_bytes <= payload / 10, f"{left_bytes:,} bytes left of {payload:,} produced"

    view = read_as_a_new_view(cluster.bootstrap, prefix, timeout=120)
    assert view.read <= POOLS + active_records, (
        f"a new view read {view.read:,} records; compaction should leave {POOLS:,} plus the "
        f"{active_records:,} of the active segment")
    assert len(view.values) == POOLS
    last_ms = BASE_MS + (periods - 1) * 1000
    stale = [k for k, v in view.values.items() if v["computed_ms"] != last_ms]
    assert not stale, f"{len(stale)} pools have an older value than the last period's, e.g. {stale[:3]}"
    return {"left_bytes": left_bytes, "segments": len(left), "active_records": active_records,
            "view_read": view.read}


def test_the_entitlements_topic_in_topics_yaml_is_compacted_in_segments_of_a_minute_once_a_tenth_is_dirty() -> None:
    topic = yaml.safe_load(TOPICS_FILE.read_text())["topics"]["entitlements"]
    config = Catalogue()["entitlements"].kafka_config()
    assert topic["cleanup_policy"] == "compact" and config["cleanup.policy"] == "compact"
    assert int(config["segment.ms"]) <= 60_000
    assert float(config["min.cleanable.dirty.ratio"]) <= 0.1


def test_a_minute_of_1000_pools_compacts_to_one_record_per_pool_and_a_new_view_reads_only_that(
        kafka_cluster) -> None:
    cluster = kafka_cluster(1)
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    prefix, topic = pipeline_topics(admin)
    have = topic_config(admin, topic)
    for k, v in Catalogue(prefix)["entitlements"].kafka_config().items():
        assert have[k] == v, f"{topic} has {k}={have[k]}, topics.yaml says {v}"
    # Why smaller segments: the cleaner never compacts the active segment, and with topics.yaml's
    # 16 MiB a minute of 1,000 pools (~22 MB) would be one segment and a half, leaving nothing
    # to show. 1 MiB (Kafka's least) makes the same minute ~20 segments; the hour at the real
    # settings is the slow test below.
    segment_bytes = 1 << 20
    entry = ConfigEntry("segment.bytes", str(segment_bytes), incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])]).values():
        future.result()
    deadline = time.monotonic() + 10
    while topic_config(admin, topic)["segment.bytes"] != str(segment_bytes):
        assert time.monotonic() < deadline, "the broker did not take the smaller segment size"
        time.sleep(0.1)

    periods = 60
    records, payload, sent_s, peak = produce(bootstrap, topic, periods, lambda: log_bytes(cluster, topic))
    assert payload >= 8 * segment_bytes, "too little produced to fill several segments"
    cleaner_s = wait_compacted(cluster, topic, timeout=45)
    figures = assert_bounded(cluster, admin, prefix, topic, periods, records, payload, segment_bytes)
    runs, busy_s = cleaner_seconds(cluster, topic)
    print(f"\n{records:,} records ({payload:,} bytes of keys and values) sent in {sent_s:.1f}s, "
          f"the log at most {peak:,} bytes while they went out; compacted {cleaner_s:.1f}s later "
          f"({runs} cleaner runs, {busy_s:.1f}s of cleaning) to {figures['left_bytes']:,} bytes "
          f"({figures['left_bytes'] / payload:.1%}) in {figures['segments']} segments; a new view read "
          f"{figures['view_read']:,} records ({POOLS:,} pools + {figures['active_records']:,} in the active segment)")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_an_hour_of_1000_pools_at_the_settings_of_topics_yaml_compacts_to_one_record_per_pool_and_the_active_segment(
        kafka_cluster) -> None:
    cluster = kafka_cluster(1)
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    prefix, topic = pipeline_topics(admin)
    config = Catalogue(prefix)["entitlements"].kafka_config()
    have = topic_config(admin, topic)
    for k, v in config.items():
        assert have[k] == v, f"{topic} has {k}={have[k]}, topics.yaml says {v}"

    periods = 3600  # entitlement_period_s = 1 s
    records, payload, sent_s, peak = produce(bootstrap, topic, periods, lambda: log_bytes(cluster, topic))
    cleaner_s = wait_compacted(cluster, topic, timeout=900)
    figures = assert_bounded(cluster, admin, prefix, topic, periods, records, payload,
                             int(config["segment.bytes"]))
    runs, busy_s = cleaner_seconds(cluster, topic)
    print(f"\n{records:,} records ({payload:,} bytes of keys and values) sent in {sent_s:.1f}s "
          f"({records / sent_s:,.0f}/s), the log at most {peak:,} bytes while they went out; "
          f"compacted {cleaner_s:.1f}s later ({runs} cleaner runs, {busy_s:.1f}s of cleaning) to "
          f"{figures['left_bytes']:,} bytes ({figures['left_bytes'] / payload:.2%}) in {figures['segments']} "
          f"segments; a new view read {figures['view_read']:,} records ({POOLS:,} pools + "
          f"{figures['active_records']:,} in the active segment) of {records:,}")
