"""Consumer lag of the pipeline's stage groups, as operators read it from Kafka tools.

Per group, topic and partition: the committed offset, the log-end offset, the lag between them,
and the lag in seconds (how long the oldest message not yet committed has waited, from its
produce timestamp, as kafka-lag-exporter estimates it). Per group a status word in Burrow's
manner, from the offsets seen over a window of samples:

  OK     nothing unread, or nothing unread at some sample of the window, or the group's position
         moves and its lag does not keep growing
  WARN   the position moves but the unread lag grew at every sample of the window
  STALL  messages waited unread and the position did not move: at every sample of the window, or
         for STALL_AFTER_S, whichever comes first (members listed)
  STOP   messages wait unread and the group has no member
  ERR    a committed offset past the log end, or one that went backwards (the log was lost)

STALL_AFTER_S is what tells a dead member within seconds: its group's coordinator lists a member
that was SIGKILLed until its session times out (PELOTON_SESSION_TIMEOUT_MS, 20 s), so STOP comes
that late; a live member moves its position within a turn (50 ms polls, one commit per batch).

Held messages are told apart from lag: a stage that holds messages (place, with gangs waiting for
a host) cannot commit past them, so its commit's metadata says how far it has read (`read=N`).
Messages between the committed offset and that position are `held`: read, waiting for room, not
a backlog. Demand queued in entitle's pools is reported beside the groups.

Committed offsets, log-end offsets and lag are what kafka-consumer-groups prints for the same
groups: the committed offset from OffsetFetch, the log end from ListOffsets (latest, which counts
transaction markers as Kafka's tool does), lag the difference.
"""

from __future__ import annotations

import contextlib
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
# Messages waiting this long while a group's position stays put make it STALL. A healthy stage
# commits at every turn; a longer wait is a dead member the coordinator still lists, a stage stuck
# in a turn (the store away), or readers held back by a transaction a killed writer left open.
STALL_AFTER_S = 5.0


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


def stalled_for(window: list[Sample]) -> float:
    """How long, by the samples, messages have waited unread with the read position unmoved: from
    the first sample of the trailing run that saw both, to the last (0 when the last sees none)."""
    last = window[-1]
    first = last
    for s in reversed(window):
        if s.unread == 0 or s.read != last.read:
            break
        first = s
    return last.at - first.at if last.unread else 0.0


def partition_status(window: list[Sample], has_members: bool, stall_after_s: float = STALL_AFTER_S) -> str:
    """Burrow's evaluation of one partition over a window of samples (oldest first), with a time
    bound on STALL besides the window's."""
    last = window[-1]
    if last.current > last.end:
        return "ERR"
    if any(b.current < a.current for a, b in pairwise(window)):
        return "ERR"
    if last.unread == 0:
        return "OK"
    if not has_members:
        return "STOP"
    if stalled_for(window) >= stall_after_s:
        return "STALL"
    if len(window) < 2:
        return "OK"  # one sample says nothing of movement
    if any(s.unread == 0 for s in window):
        return "OK"  # caught up within the window: messages that just arrived are no stall (Burrow)
    if last.read == window[0].read:
        return "STALL"
    unread = [s.unread for s in window]
    if len(window) >= 3 and all(b > a for a, b in pairwise(unread)):
        return "WARN"
    return "OK"


def group_status(statuses: list[str]) -> str:
    return max(statuses, key=STATUSES.index, default="OK")


def status_detail(group: dict) -> str:
    """Why a group has its status, in a sentence, from one group of a sample (LagMonitor.sample)."""
    status, lag, count = group["status"], group["total_lag"], group.get("member_count")
    listed = "members unknown" if count is None else f"{count} member{'' if count == 1 else 's'} listed"
    waited = f", the oldest for {group['max_lag_seconds']:.1f} s" if group.get("max_lag_seconds") else ""
    if status == "STOP":
        return f"no member, and {lag:,} messages wait{waited}"
    if status == "STALL":
        return (f"{lag - group.get('held', 0):,} messages wait unread and its position has not moved for "
                f"{group.get('stalled_seconds', 0.0):.1f} s; {listed} (the coordinator lists a member that "
                f"died until its session times out)")
    if status == "WARN":
        return f"its position moves but it falls further behind at every sample ({lag:,} messages); {listed}"
    if status == "ERR":
        return ("a committed offset past the log end or gone back (the broker lost its log), or a partition "
                "the broker did not answer for")
    return f"{lag:,} messages behind; {listed}" if lag else f"caught up; {listed}"


def stage_of(settings: Settings, name: str) -> str | None:
    """The stage a `--group` names: a stage (`place`) or its group (`peloton.place`), or None."""
    catalogue = Catalogue(settings.topic_prefix)
    return next((s for s in STAGES if name in (s, catalogue.group(s))), None)


class LagMonitor:
    """Samples the stage groups' lag; keeps the last `window` samples of each partition for the
    status words. One per `pelotonctl lag` run without an API, and one per lag sampler
    (pelotonctl.lag_sampler: the API's, which `pelotonctl lag` and the dashboard read), each in a
    process of its own (pelotonctl.lag_child: librdkafka can abort the process that asks a
    coordinator)."""

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
        self._reader: Consumer | None = None  # reads the first unread message's time; made on first use
        self._produced: dict[tuple[str, int], tuple[int, int]] = {}  # partition -> (offset, its produce time)

    # -- what the broker says ------------------------------------------------------------
    def _committed(self, groups: dict[str, list[TopicPartition]]) -> dict[str, tuple[dict, dict]]:
        """Per group, its committed offsets (-1 where it has none), and how far it has read where a
        commit's metadata says it holds messages (`read=N`). The groups are asked at once (one
        group per request is what the client takes) and answered in one wait."""
        futures = {group: self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, parts)],
                                                                 request_timeout=self.timeout_s)[group]
                   for group, parts in groups.items()}
        out = {}
        for group, future in futures.items():
            offsets, reads = {}, {}
            for tp in future.result().topic_partitions:
                offsets[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
                if tp.metadata and tp.metadata.startswith("read="):
                    reads[(tp.topic, tp.partition)] = int(tp.metadata[5:])
            out[group] = (offsets, reads)
        return out

    def _members(self, groups: list[str]) -> dict[str, int | None]:
        """How many members each group has now (0 when its state says it has none), None where
        the coordinator did not say."""
        out: dict[str, int | None] = {}
        for group, future in self.admin.describe_consumer_groups(groups, request_timeout=self.timeout_s).items():
            try:
                described = future.result()
            except KafkaException:
                out[group] = None
                continue
            live = described.state in (ConsumerGroupState.STABLE, ConsumerGroupState.PREPARING_REBALANCING,
                                       ConsumerGroupState.COMPLETING_REBALANCING)
            out[group] = len(described.members) if live else 0
        return out

    def _ends(self, parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Per partition, the log-end offset as ListOffsets gives it (latest: the high-water mark)."""
        return offsets_at(self.admin, parts, OffsetSpec.latest(), self.timeout_s)  # unanswered: no end shown

    def _times(self, starts: dict[tuple[str, int], int], ends: dict[tuple[str, int], int]) -> dict:
        """Per partition with unread messages, the produce time (ms) of the message at its start
        offset. A start seen before keeps the time read then (a stopped group's start stays put
        while its lag in seconds grows); the others are read with one consumer of the monitor's
        own, assigned at each start (no group: it commits nothing), so a sample a second costs
        no new connection."""
        starts = {tp: off for tp, off in starts.items() if tp in ends and ends[tp] > max(off, 0)}
        known = {tp: self._produced[tp] for tp in starts if self._produced.get(tp, (None,))[0] == starts[tp]}
        self._produced = dict(known)  # what no start points at any more goes
        times = {tp: at for tp, (_off, at) in known.items()}
        wanted = {tp: off for tp, off in starts.items() if tp not in known}
        if not wanted:
            return times
        if self._reader is None:
            self._reader = Consumer({
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
        reader = self._reader
        # A group with no commit starts at 0 (out of range on a log that lost its head, which
        # auto.offset.reset turns into the earliest).
        parts = {tp: TopicPartition(tp[0], tp[1], max(off, 0)) for tp, off in wanted.items()}
        reader.assign(list(parts.values()))
        try:
            deadline = time.monotonic() + self.timeout_s
            while len(times) < len(starts) and time.monotonic() < deadline:
                for m in reader.consume(500, 0.05):
                    tp = (m.topic(), m.partition())
                    if m.error() is None and tp in wanted and tp not in times:
                        times[tp] = m.timestamp()[1]
                        self._produced[tp] = (wanted[tp], times[tp])
                        reader.pause([parts[tp]])
        finally:
            with contextlib.suppress(KafkaException):  # a pause would outlive the assignment
                reader.resume(list(parts.values()))
            reader.unassign()
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
        parts = {groups[stage]: [TopicPartition(t.name, p)
                                 for t in self.catalogue.inputs_of(stage) for p in range(t.partitions)]
                 for stage in stages}
        answered = self._committed(parts)
        committed = {stage: answered[groups[stage]][0] for stage in stages}
        positions = {stage: answered[groups[stage]][1] for stage in stages}
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
            count = members.get(group)
            # A coordinator that did not say is no evidence of a stop: STALL still tells a dead group.
            has_members = count is None or count > 0
            rows, statuses, stalled = [], [], 0.0
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
                stalled = max(stalled, stalled_for(list(window)))
                statuses.append(partition_status(list(window)[-look_back:], has_members))
                rows.append(_row(tp, current, end, lag, lag_s, held, statuses[-1]))
            known = [r for r in rows if r["lag"] is not None]
            entry = {
                "group": group, "stage": stage, "status": group_status(statuses) if known else "ERR",
                "members": has_members, "member_count": count,
                "total_lag": sum(r["lag"] for r in known),
                "held": sum(r["held"] for r in known),
                "max_lag_seconds": max((r["lag_seconds"] or 0.0 for r in known), default=0.0),
                "stalled_seconds": round(stalled, 3),
                "partitions": rows,
            }
            report.append({**entry, "detail": status_detail(entry)})
        return {"groups": report, "queued": self._queued_demand(), "sampled_ms": int(now * 1000)}

    def close(self) -> None:
        if self._queued is not None:
            self._queued.close()
        if self._reader is not None:
            self._reader.close()


def _row(tp: tuple[str, int], current: int, end: int | None, lag: int | None, lag_s: float | None, held: int,
         status: str = "ERR") -> dict:
    return {"topic": tp[0], "partition": tp[1], "current_offset": current if current >= 0 else None,
            "log_end_offset": end, "lag": lag, "lag_seconds": lag_s, "held": held, "status": status}
