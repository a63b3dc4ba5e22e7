"""Consumer lag of the pipeline's stage groups, as operators read it from Kafka tools.

Per group, topic and partition: the committed offset, the log-end offset, the lag between them,
and the lag in seconds (how long the oldest message not yet committed has waited, from its
produce timestamp, as kafka-lag-exporter estimates it). Per group a status word in Burrow's
manner, from the offsets seen over a window of samples:

  OK     nothing unread, or the group's position moves and its lag does not keep growing
  WARN   the position moves but the unread lag grew at every sample of the window
  STALL  messages wait unread and the position did not move over the window (members present)
  STOP   messages wait unread and the group has no member
  ERR    a committed offset past the log end, or one that went backwards (the log was lost)

Held messages are told apart from lag: a stage that holds messages (place, with gangs waiting for
a host) cannot commit past them, so its commit's metadata says how far it has read (`read=N`).
Messages between the committed offset and that position are `held`: read, waiting for room, not
a backlog. Demand queued in entitle's pools is reported beside the groups.

Committed offsets, log-end offsets and lag are what kafka-consumer-groups prints for the same
groups: the committed offset from OffsetFetch, the log end from ListOffsets (latest, which counts
transaction markers as Kafka's tool does), lag the difference.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from dataclasses import dataclass
from itertools import pairwise

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from peloton.config import Settings
from peloton.runtime import QUIET, RECOVERY, kafka_access
from peloton.runtime.readback import offsets_at
from peloton.topics import Catalogue

STAGES = ("admit", "entitle", "place", "launch")  # in pipeline order
STATUSES = ("OK", "WARN", "STALL", "STOP", "ERR")  # from best to worst


@dataclass(frozen=True)
class Sample:
    """One partition of one group, as seen at `at` (seconds)."""

    at: float
    current: int  # committed offset (the next message the group will handle)
    end: int  # log-end offset (high-water mark)
    read: int  # how far the group has read: its committed offset, or further when it holds messages

    @property
    def unread(self) -> int:
        return max(0, self.end - self.read)


def partition_status(window: list[Sample], has_members: bool) -> str:
    """Burrow's evaluation of one partition over a window of samples (oldest first)."""
    last = window[-1]
    if last.current > last.end:
        return "ERR"
    if any(b.current < a.current for a, b in pairwise(window)):
        return "ERR"
    if last.unread == 0:
        return "OK"
    if not has_members:
        return "STOP"
    if len(window) < 2:
        return "OK"  # one sample says nothing of movement
    if last.read == window[0].read:
        return "STALL"
    unread = [s.unread for s in window]
    if len(window) >= 3 and all(b > a for a, b in pairwise(unread)):
        return "WARN"
    return "OK"


def group_status(statuses: list[str]) -> str:
    return max(statuses, key=STATUSES.index, default="OK")


def stage_of(settings: Settings, name: str) -> str | None:
    """The stage a `--group` names: a stage (`place`) or its group (`peloton.place`), or None."""
    catalogue = Catalogue(settings.topic_prefix)
    return next((s for s in STAGES if name in (s, catalogue.group(s))), None)


class LagMonitor:
    """Samples the stage groups' lag; keeps the last `window` samples of each partition for the
    status words. One per CLI call, `--watch` loop, dashboard or API instance (whose callers ask
    for fewer stages or a shorter window per sample), each in a process of its own
    (pelotonctl.lag_child: librdkafka can abort the process that asks a coordinator)."""

    def __init__(self, settings: Settings, stages: tuple[str, ...] = STAGES, window: int = 10,
                 timeout_s: float = 5.0):
        self.settings = settings
        self.catalogue = Catalogue(settings.topic_prefix)
        self.stages = stages
        self.timeout_s = timeout_s
        self.admin = AdminClient({**kafka_access(settings), **RECOVERY, **QUIET})
        self._windows: dict[tuple[str, str, int], deque[Sample]] = {}
        self._window = window
        self._queued = None  # the entitlements view, opened on first use

    # -- what the broker says ------------------------------------------------------------
    def _committed(self, group: str, parts: list[TopicPartition]) -> tuple[dict[tuple[str, int], int],
                                                                           dict[tuple[str, int], int]]:
        """The group's committed offsets (-1 where it has none), and how far it has read where a
        commit's metadata says it holds messages (`read=N`)."""
        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, parts)],
                                                         request_timeout=self.timeout_s)
        result = futures[group].result()
        offsets, reads = {}, {}
        for tp in result.topic_partitions:
            offsets[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
            if tp.metadata and tp.metadata.startswith("read="):
                reads[(tp.topic, tp.partition)] = int(tp.metadata[5:])
        return offsets, reads

    def _members(self, groups: list[str]) -> dict[str, bool]:
        """Whether each group has members now (its state says so)."""
        out = {}
        for group, future in self.admin.describe_consumer_groups(groups, request_timeout=self.timeout_s).items():
            try:
                state = future.result().state
            except KafkaException:
                state = ConsumerGroupState.UNKNOWN
            out[group] = state in (ConsumerGroupState.STABLE, ConsumerGroupState.PREPARING_REBALANCING,
                                   ConsumerGroupState.COMPLETING_REBALANCING)
        return out

    def _ends(self, parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Per partition, the log-end offset as ListOffsets gives it (latest: the high-water mark)."""
        return offsets_at(self.admin, parts, OffsetSpec.latest(), self.timeout_s)  # unanswered: no end shown

    def _times(self, starts: dict[tuple[str, int], int], ends: dict[tuple[str, int], int]) -> dict:
        """Per partition with unread messages, the produce time (ms) of the message at its start
        offset, read with a throwaway consumer that fetches from each start."""
        starts = {tp: off for tp, off in starts.items() if tp in ends and ends[tp] > max(off, 0)}
        if not starts:
            return {}
        reader = Consumer({
            **kafka_access(self.settings),
            "group.id": f"{self.catalogue.prefix}peloton.lag-reader.{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 10,
            **QUIET,
            "fetch.max.bytes": 1_048_576,
            "max.partition.fetch.bytes": 65_536,  # only the first message of each is wanted
        })
        times: dict[tuple[str, int], int] = {}
        try:
            # A group with no commit starts at 0 (out of range on a log that lost its head, which
            # auto.offset.reset turns into the earliest).
            parts = {tp: TopicPartition(tp[0], tp[1], max(off, 0)) for tp, off in starts.items()}
            reader.assign(list(parts.values()))
            deadline = time.monotonic() + self.timeout_s
            while len(times) < len(parts) and time.monotonic() < deadline:
                for m in reader.consume(500, 0.05):
                    tp = (m.topic(), m.partition())
                    if m.error() is None and tp not in times:
                        times[tp] = m.timestamp()[1]
                        reader.pause([parts[tp]])
        finally:
            reader.close()
        return times

    def _queued_demand(self) -> list[dict]:
        """Each pool's queued gangs and demand, as entitle last published them: demand waiting
        for room in its pool, which is not lag."""
        from peloton.runtime import CompactedView

        if self._queued is None:
            self._queued = CompactedView(self.settings, "entitlements", self.catalogue, quiet=True)
        self._queued.catch_up(timeout=self.timeout_s)
        return [{"pool": pool, "queued_gangs": rec.get("queued_gangs", 0), "demand": rec["demand"]}
                for pool, rec in sorted(self._queued.values.items())]

    # -- one sample ---------------------------------------------------------------------
    def sample(self, stages: tuple[str, ...] | None = None, window: int | None = None) -> dict:
        """Everything the lag table shows, as JSON-able data (the `--json` shape): of `stages` (a
        subset of the monitor's, default all), with status words over the last `window` samples
        (at most the monitor's window)."""
        now = time.time()
        stages = tuple(s for s in self.stages if stages is None or s in stages)
        look_back = min(window or self._window, self._window)
        groups = {stage: self.catalogue.group(stage) for stage in stages}
        parts = {stage: [TopicPartition(t.name, p)
                         for t in self.catalogue.inputs_of(stage) for p in range(t.partitions)]
                 for stage in stages}
        committed, positions = {}, {}
        for stage in stages:
            committed[stage], positions[stage] = self._committed(groups[stage], parts[stage])
        members = self._members(list(groups.values()))
        # Topics are read by one group each today; if two groups shared one, its start is the lower.
        starts: dict[tuple[str, int], int] = {}
        for stage in stages:
            for tp, off in committed[stage].items():
                starts[tp] = min(starts.get(tp, off), off) if tp in starts else off
        ends = self._ends(list(starts))
        times = self._times(starts, ends)
        report = []
        for stage in stages:
            group = groups[stage]
            rows, statuses = [], []
            for tp in sorted(committed[stage]):
                current = committed[stage][tp]
                end = ends.get(tp)
                base = max(current, 0)
                if end is None:  # the broker did not answer for it in time
                    rows.append(_row(tp, current, None, None, None, 0))
                    continue
                read = max(base, min(positions[stage].get(tp, -1), end))
                lag = max(0, end - base)
                held = read - base
                produced = times.get(tp) if starts.get(tp) == current else None
                lag_s = (round(max(0.0, now - produced / 1000), 3) if lag and produced and produced > 0
                         else (0.0 if not lag else None))
                window = self._windows.setdefault((group, *tp), deque(maxlen=self._window))
                window.append(Sample(now, base, end, read))
                statuses.append(partition_status(list(window)[-look_back:], members.get(group, False)))
                rows.append(_row(tp, current, end, lag, lag_s, held, statuses[-1]))
            known = [r for r in rows if r["lag"] is not None]
            report.append({
                "group": group, "stage": stage, "status": group_status(statuses) if known else "ERR",
                "members": members.get(group, False),
                "total_lag": sum(r["lag"] for r in known),
                "held": sum(r["held"] for r in known),
                "max_lag_seconds": max((r["lag_seconds"] or 0.0 for r in known), default=0.0),
                "partitions": rows,
            })
        return {"groups": report, "queued": self._queued_demand(), "sampled_ms": int(now * 1000)}

    def close(self) -> None:
        if self._queued is not None:
            self._queued.close()


def _row(tp: tuple[str, int], current: int, end: int | None, lag: int | None, lag_s: float | None, held: int,
         status: str = "ERR") -> dict:
    return {"topic": tp[0], "partition": tp[1], "current_offset": current if current >= 0 else None,
            "log_end_offset": end, "lag": lag, "lag_seconds": lag_s, "held": held, "status": status}
