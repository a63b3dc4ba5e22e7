"""Task events as a Server-Sent Events stream, read from the task-status topic: a job's (from its
creation on), or every job's of a pool (from now on). Each event's id is where the stream stands
on every partition it reads, so a client that reconnects with Last-Event-ID misses nothing and
sees nothing twice, as long as the topic still holds it (3 days)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator

from confluent_kafka import Consumer, TopicPartition

from peloton.config import Settings
from peloton.model.events import statuses_of_runs
from peloton.model.states import MESOS_TO_TASK, PROGRESS_LANDS
from peloton.runtime import CONSUMER_RECOVERY, QUIET, kafka_access
from peloton.serde import DecodeError, registry, unbundle
from peloton.topics import Catalogue, partition_for

KEEPALIVE_S = 15.0
PROGRESS = "peloton.TaskProgress"
OF_MANY_RUNS = (PROGRESS, "peloton.TaskStatusRuns")  # records that tell of many runs


class Position:
    """Per partition, the last (offset, index in its bundle) delivered: what an event id says."""

    def __init__(self, at: dict[int, tuple[int, int]] | None = None):
        self.at = dict(at or {})

    @staticmethod
    def parse(text: str | None) -> Position | None:
        """An event id as this stream writes it ("0:41.2;3:7.0"), or None for anything else."""
        if not text:
            return None
        at = {}
        try:
            for part in text.split(";"):
                partition, _, where = part.partition(":")
                offset, _, index = where.partition(".")
                at[int(partition)] = (int(offset), int(index or -1))
        except ValueError:
            return None
        return Position(at)

    def passed(self, partition: int, offset: int, index: int) -> bool:
        """Whether this record was delivered already."""
        seen = self.at.get(partition)
        return seen is not None and (offset, index) <= seen

    def __str__(self) -> str:
        return ";".join(f"{p}:{o}.{i}" for p, (o, i) in sorted(self.at.items()))


def task_events(settings: Settings, wanted: Callable[[str], bool], job_id: str | None = None,
                since_ms: int | None = None, resume: Position | None = None, follow: bool = True) -> Iterator[str]:
    """SSE lines: a job's events (job_id given: its partition only), or those of every job
    `wanted` says yes to. Starts after `resume`, else at `since_ms`, else at the log's end; with
    follow=False, ends once it reaches what was written when it started. Yields "" after a poll
    that found nothing to send."""
    catalogue = Catalogue(settings.topic_prefix)
    spec = catalogue["task-status"]
    partitions = [partition_for(job_id, spec.partitions)] if job_id else list(range(spec.partitions))
    consumer = Consumer({**kafka_access(settings), "group.id": f"{catalogue.prefix}peloton.api-stream."
                         f"{uuid.uuid4().hex[:8]}", "enable.auto.commit": False, "fetch.wait.max.ms": 250,
                         **CONSUMER_RECOVERY, **QUIET})
    serde = registry()
    try:
        starts = _starts(consumer, spec.name, partitions, resume, since_ms)
        # Where the stream stands before its first event: everything before each start delivered.
        position = Position({p: (o - 1, 1 << 30) for p, o in starts.items()})
        position.at.update(resume.at if resume else {})
        consumer.assign([TopicPartition(spec.name, p, o) for p, o in starts.items()])
        ends = {p: consumer.get_watermark_offsets(TopicPartition(spec.name, p), timeout=10)[1] for p in partitions} \
            if not follow else {}
        quiet_since = time.monotonic()
        yield "retry: 2000\n\n"
        while True:
            msgs = consumer.consume(500, 1.0)
            for m in msgs:
                if m.error() is not None or m.value() is None:
                    continue
                if m.key() is not None and job_id is not None and m.key().decode("utf-8", "replace") != job_id:
                    continue
                try:
                    schema, value = serde.decode(m.value())
                except DecodeError:
                    continue
                item, values = unbundle(schema, value)
                bundled = item != schema
                for index, v in enumerate(values):
                    if not wanted(v["job_id"]):
                        continue
                    # Where each event stands: a bundle's by the status's place in it, a record of
                    # many runs' (each run maybe two events) by the event's place in it.
                    for k, event in enumerate(_events(item, v)):
                        at = (m.partition(), m.offset(), index if bundled else k if item in OF_MANY_RUNS else -1)
                        if resume is not None and resume.passed(*at):
                            continue
                        position.at[at[0]] = (at[1], at[2])
                        yield f"id: {position}\nevent: task\ndata: {json.dumps(event)}\n\n"
                        quiet_since = time.monotonic()
            if not follow and all(_read_to(consumer, spec.name, p, starts[p]) >= end for p, end in ends.items()):
                return
            if time.monotonic() - quiet_since > KEEPALIVE_S:
                yield ": keepalive\n\n"  # through proxies that drop idle connections
                quiet_since = time.monotonic()
            else:
                yield ""  # nothing to send: the caller may check that its client is still there
    finally:
        consumer.close()


def _starts(consumer: Consumer, topic: str, partitions: list[int], resume: Position | None,
            since_ms: int | None) -> dict[int, int]:
    """Partition -> the offset to read from: after what `resume` saw, else the first record at or
    after since_ms, else the log's end. Concrete offsets, so that every event id can name every
    partition (a client that resumes before a partition had an event misses none of it)."""
    starts = {}
    found = {}
    if since_ms is not None:
        found = {tp.partition: tp.offset for tp in
                 consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in partitions], timeout=10)}
    for p in partitions:
        if resume is not None and p in resume.at:
            starts[p] = resume.at[p][0]
        elif found.get(p, -1) >= 0:
            starts[p] = found[p]
        else:
            starts[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    return starts


def _read_to(consumer: Consumer, topic: str, partition: int, start: int) -> int:
    """How far a partition has been read: its position, past transaction markers too; where
    nothing has been fetched yet (a partition with nothing past its start has no position), its
    start."""
    [tp] = consumer.position([TopicPartition(topic, partition)])
    return max(tp.offset, start)


def _events(schema: str, v: dict) -> list[dict]:
    """A status record as the events people read: one per run, Peloton's state words."""
    if schema == PROGRESS:
        # the step, and where it leaves the run where that differs (LAUNCHING: LAUNCHED), as the
        # run's history in the store shows it
        states = [v["state"]] + ([PROGRESS_LANDS[v["state"]]] if v["state"] in PROGRESS_LANDS else [])
        return [{"job_id": v["job_id"], "instance": r["instance"], "run_id": r["run_id"], "state": state,
                 "host": r.get("host_id") or "", "reason": "", "message": "", "exit_code": None, "health": "",
                 "timestamp_ms": v["timestamp_ms"]} for r in v["runs"] for state in states]
    if schema == "peloton.TaskStatusRuns":
        return [_events("peloton.TaskStatus", status)[0] for status in statuses_of_runs(v)]
    return [{"job_id": v["job_id"], "instance": v["instance"], "run_id": v["run_id"],
             "state": MESOS_TO_TASK.get(v["state"], v["state"]), "host": v.get("host_id") or "",
             "reason": v.get("reason") or "", "message": v.get("message") or "", "exit_code": v.get("exit_code"),
             "health": v.get("health") or "", "timestamp_ms": v["timestamp_ms"]}]
