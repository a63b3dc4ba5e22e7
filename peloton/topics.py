"""The topic catalogue (topics.yaml), key partitioning, and idempotent topic creation."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from peloton.config import REPO_ROOT

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
            )
        self.by_name = {t.name: t for t in self.by_id.values()}

    def __getitem__(self, tid: str) -> TopicSpec:
        return self.by_id[tid]

    def __iter__(self):
        return iter(self.by_id.values())

    def group(self, stage: str) -> str:
        return f"{self.prefix}peloton.{stage}"

    def position_group(self, stage: str) -> str:
        """Where a stage that holds messages back records how far it has read (see runtime._commit)."""
        return f"{self.group(stage)}.position"

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


def apply_topics(admin, catalogue: Catalogue, timeout: float = 15.0) -> list[dict]:
    """Create missing topics; report existing ones and any partition-count mismatch. Idempotent."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    existing = admin.list_topics(timeout=timeout).topics
    report = []
    missing = []
    for t in catalogue:
        if t.name in existing:
            have = len(existing[t.name].partitions)
            status = "ok" if have == t.partitions else f"mismatch: has {have} partitions, want {t.partitions}"
            report.append({"topic": t.name, "partitions": have, "cleanup_policy": t.cleanup_policy, "status": status})
        else:
            missing.append(t)
    if missing:
        futures = admin.create_topics(
            [NewTopic(t.name, t.partitions, 1, config={"cleanup.policy": t.cleanup_policy}) for t in missing],
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
            report.append({"topic": t.name, "partitions": t.partitions, "cleanup_policy": t.cleanup_policy, "status": status})
    order = {t.name: i for i, t in enumerate(catalogue)}
    report.sort(key=lambda r: order[r["topic"]])
    return report
