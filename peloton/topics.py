"""The topic catalogue (topics.yaml), key partitioning, and idempotent topic creation."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from peloton.config import REPO_ROOT

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

TOPICS_FILE = REPO_ROOT / "topics.yaml"


@dataclass(frozen=True)
class TopicSpec:
    id: str  # logical id used in code, e.g. "task-status"
    name: str  # real topic name, prefix included
    partitions: int
    key: str
    cleanup_policy: str
    value_schemas: tuple[str, ...]
    read_by: tuple[str, ...] = ()  # the stages (consumer groups) and other readers of the topic
    written_by: tuple[str, ...] = ()  # who produces to it (the Kafka ACLs follow this and read_by)
    read_back_by: tuple[str, ...] = ()  # who reads back what it wrote there, outside its group
    config: tuple[tuple[str, str], ...] = ()  # Kafka topic settings (retention, segments, compaction)

    def kafka_config(self) -> dict[str, str]:
        """The topic's settings as Kafka takes them, its cleanup policy included."""
        return {"cleanup.policy": self.cleanup_policy, **dict(self.config)}


class Catalogue:
    def __init__(self, prefix: str = "", path: Path = TOPICS_FILE):
        doc = yaml.safe_load(path.read_text())
        self.prefix = prefix
        self.by_id: dict[str, TopicSpec] = {}
        for tid, t in doc["topics"].items():
            self.by_id[tid] = TopicSpec(
                id=tid,
                name=prefix + t["name"],
                partitions=int(t["partitions"]),
                key=t["key"],
                cleanup_policy=t["cleanup_policy"],
                value_schemas=tuple(t["value_schemas"]),
                read_by=tuple(t.get("read_by", ())),
                written_by=tuple(t.get("written_by", ())),
                read_back_by=tuple(t.get("read_back_by", ())),
                config=tuple((str(k), str(v)) for k, v in (t.get("config") or {}).items()),
            )
        self.by_name = {t.name: t for t in self.by_id.values()}

    def __getitem__(self, tid: str) -> TopicSpec:
        return self.by_id[tid]

    def __iter__(self) -> Iterator[TopicSpec]:
        return iter(self.by_id.values())

    def group(self, stage: str) -> str:
        return f"{self.prefix}peloton.{stage}"

    def inputs_of(self, stage: str) -> list[TopicSpec]:
        """The topics a stage's consumer group reads. Compacted topics are read whole by every
        instance as views, outside the group, so they have no group offsets and no lag."""
        return [t for t in self if stage in t.read_by and t.cleanup_policy != "compact"]


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (as the Java client and librdkafka's murmur2 partitioner compute it)."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length & 3
    tail = 4 * n4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


@functools.lru_cache(maxsize=1 << 16)
def partition_for(key: str, partitions: int) -> int:
    """The partition a key lands on, the same as a Java producer's default partitioner, so that a
    stage can tell which pools or hosts belong to the partitions it was assigned. Remembered: the
    same job ids and pools come back with every status, and murmur2 in Python costs microseconds."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def apply_topics(admin: AdminClient, catalogue: Catalogue, timeout: float = 15.0, fix: bool = True) -> list[dict]:
    """Create missing topics with their settings; set the settings of existing ones where they
    differ from topics.yaml (`fix`), or only say how (a stage's check at start). A partition
    count that differs is reported, never changed: keys would move to other partitions.
    Idempotent; several callers at once are fine."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    metadata = admin.list_topics(timeout=timeout)
    replicas = min(3, max(1, len(metadata.brokers)))
    existing = metadata.topics
    report: list[dict[str, Any]] = []
    missing = []
    present = [t for t in catalogue if t.name in existing]
    differences = _config_differences(admin, present, timeout) if present else {}
    for t in present:
        have = len(existing[t.name].partitions)
        row = {"topic": t.name, "partitions": have, "replicas": len(existing[t.name].partitions[0].replicas),
               "cleanup_policy": t.cleanup_policy, "status": "ok"}
        if have != t.partitions:
            row["status"] = f"mismatch: has {have} partitions, want {t.partitions}"
        elif differences.get(t.name):
            changes = ", ".join(f"{k} is {have_v}, want {want_v}"
                                for k, (have_v, want_v) in differences[t.name].items())
            if fix:
                _set_config(admin, t, differences[t.name], timeout)
                row["status"] = f"updated: {changes}"
            else:
                row["status"] = f"differs: {changes}"
        report.append(row)
    missing = [t for t in catalogue if t.name not in existing]
    if missing:
        futures = admin.create_topics(
            [NewTopic(t.name, t.partitions, replicas, config=t.kafka_config()) for t in missing],
            request_timeout=timeout,
        )
        for t in missing:
            try:
                futures[t.name].result()
                status = "created"
            except Exception as exc:  # a concurrent apply may have created it first
                err = exc.args[0] if exc.args else None
                if getattr(err, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                    status = "ok"
                else:
                    raise
            report.append({"topic": t.name, "partitions": t.partitions, "replicas": replicas,
                           "cleanup_policy": t.cleanup_policy, "status": status})
        _wait_until_served(admin, [t.name for t in missing], timeout)
    order = {t.name: i for i, t in enumerate(catalogue)}
    report.sort(key=lambda r: order[r["topic"]])
    return report


def _wait_until_served(admin: AdminClient, names: list[str], timeout: float) -> None:
    """Return once the broker serves every topic named, with a leader for each partition: the
    controller answers CreateTopics before the brokers' metadata has the topic, and a request in
    between (DescribeConfigs, a first produce) gets UNKNOWN_TOPIC_OR_PART. Returns at the timeout
    regardless: the topics exist, and clients retry."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=max(0.1, deadline - time.monotonic())).topics
        if all(n in topics and topics[n].error is None and topics[n].partitions
               and all(p.leader >= 0 for p in topics[n].partitions.values()) for n in names):
            return
        time.sleep(0.1)


def _config_differences(admin: AdminClient, topics: list[TopicSpec],
                        timeout: float) -> dict[str, dict[str, tuple[str | None, str]]]:
    """Per topic, the settings of topics.yaml whose value on the broker differs: name -> (have,
    want); have is None where the broker has no such setting."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    resources = [ConfigResource(ResourceType.TOPIC, t.name) for t in topics]
    answers = admin.describe_configs(resources, request_timeout=timeout)
    out: dict[str, dict[str, tuple[str | None, str]]] = {}
    by_name = {t.name: t for t in topics}
    for resource, future in answers.items():
        entries = future.result()
        want = by_name[resource.name].kafka_config()
        diff = {k: (entries[k].value if k in entries else None, v) for k, v in want.items()
                if k not in entries or entries[k].value != v}
        if diff:
            out[resource.name] = diff
    return out


def _set_config(admin: AdminClient, topic: TopicSpec, diff: dict[str, tuple[str | None, str]], timeout: float) -> None:
    """Set only the settings that differ (incremental: the topic's other settings stay)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k, want, incremental_operation=AlterConfigOpType.SET) for k, (_have, want) in diff.items()]
    resource = ConfigResource(ResourceType.TOPIC, topic.name, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource], request_timeout=timeout).values():
        future.result()
