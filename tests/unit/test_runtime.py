"""The runtime's promises, with a stand-in consumer (a pure unit test: no broker): a record that
breaks its handler is dead-lettered and the rest of its batch lives; a store that is away is
waited for, not blamed on a record; a stage stopped while it waits commits nothing it did not
handle."""

from __future__ import annotations

import math
import sqlite3

from peloton.config import Settings
from peloton.runtime import RecordingEmitter, Stage, StageRuntime
from peloton.serde import registry
from peloton.topics import Catalogue

CAT = Catalogue()


class Message:
    def __init__(self, offset: int, value: bytes, topic: str = "job-commands", partition: int = 0):
        self._offset, self._value, self._topic, self._partition = offset, value, CAT[topic].name, partition

    def error(self):
        return None

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def key(self):
        return b"k"

    def value(self):
        return self._value

    def timestamp(self):
        return (1, 1_700_000_000_000 + self._offset)  # (create time, ms)


class Consumer:
    """Hands out one batch, then nothing; remembers what was committed."""

    def __init__(self, batch):
        self.batch, self.commits = list(batch), []
        self.end = len(self.batch)  # the log end a fetch would report

    def consume(self, num_messages, timeout):
        batch, self.batch = self.batch, []
        return batch

    def commit(self, offsets, asynchronous):
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})

    def get_watermark_offsets(self, tp, cached):
        return (0, self.end)

    def close(self):
        pass


def command(job_id: str) -> bytes:
    return registry().encode("peloton.JobCommand", {
        "command_id": job_id, "kind": "CREATE", "job_id": job_id, "pool": "/p", "config": "x",
        "requested_by": "t", "timestamp_ms": 1})


class Recorder(Stage):
    name = "recorder"
    inputs = ("job-commands",)

    def __init__(self, fail=lambda job_id, calls: None):
        self.fail, self.calls, self.handled = fail, 0, []

    def handle(self, records):
        self.calls += 1
        for r in records:
            self.fail(r.value["job_id"], self.calls)
        self.handled.extend(r.value["job_id"] for r in records)
        for r in records:
            self.emit.emit("task-demand", "/p", "peloton.TaskRelease", {
                "task_id": r.value["job_id"], "job_id": r.value["job_id"], "pool": "/p", "reason": "", "timestamp_ms": 1})


def runtime_for(stage: Stage, batch) -> tuple[StageRuntime, Consumer, RecordingEmitter]:
    settings = Settings(bootstrap="127.0.0.1:9", retry_min_s=0.01, retry_max_s=0.02, metrics_port=-1)
    rt = StageRuntime(stage, settings, "test")
    rt.consumer = Consumer(batch)
    rt.emitter = RecordingEmitter(stage.name)
    stage.bind(rt.emitter, settings, rt.catalogue)
    rt._next_topic_check = math.inf
    rt.assigned = {("job-commands", 0)}
    return rt, rt.consumer, rt.emitter


def test_a_record_that_breaks_its_handler_is_dead_lettered_and_the_batch_is_committed() -> None:
    def fail(job_id, calls):
        if job_id == "poison":
            raise KeyError("something the handler did not expect")

    stage = Recorder(fail)
    rt, consumer, out = runtime_for(stage, [Message(i, command(j)) for i, j in enumerate(["a", "poison", "b"])])
    rt.run_once()
    assert stage.handled == ["a", "b"]
    [(_, _, _, letter)] = out.take("dead-letters")
    assert letter["offset"] == 1 and "KeyError" in letter["reason"] and letter["stage"] == "recorder"
    # only the good records' output went out: the failed batch's output was discarded
    assert [v["task_id"] for _, _, _, v in out.take("task-demand")] == ["a", "b"]
    assert consumer.commits == [{(CAT["job-commands"].name, 0): 3}]
    assert rt.failed_records == 1


def test_a_store_that_is_away_is_waited_for_and_not_blamed_on_the_record() -> None:
    def fail(job_id, calls):
        if calls <= 3:
            raise sqlite3.OperationalError("database is locked")

    stage = Recorder(fail)
    rt, consumer, out = runtime_for(stage, [Message(0, command("a"))])
    rt.run_once()
    assert stage.handled == ["a"] and rt.retries == 3
    assert out.take("dead-letters") == []
    assert consumer.commits == [{(CAT["job-commands"].name, 0): 1}]


def test_a_stage_stopped_while_it_waits_commits_nothing_it_did_not_handle() -> None:
    rt = None

    def fail(job_id, calls):
        if calls == 2:
            rt.stop()  # SIGTERM arrives while the store is away
        raise sqlite3.OperationalError("database is locked")

    stage = Recorder(fail)
    rt, consumer, out = runtime_for(stage, [Message(7, command("a"))])
    rt.run_once()
    rt._shutdown()
    assert stage.handled == []
    assert all(CAT["job-commands"].name not in {t for t, _ in c} for c in consumer.commits)
    assert out.take() == []


def test_positions_from_before_a_broker_outage_are_not_committed_after_it() -> None:
    """The broker that answers after an outage may have restarted empty: committing the old
    positions there would skip its new messages."""
    from peloton.runtime import DeliveryError

    stage = Recorder()
    rt, consumer, out = runtime_for(stage, [Message(4, command("a"))])
    failures = iter([True, True])

    def flush(timeout: float = 30.0) -> None:
        if next(failures, False):
            raise DeliveryError("1 messages not delivered to the broker within 10s")
        RecordingEmitter.flush(out, timeout)

    out.flush = flush
    rt.run_once()
    assert stage.handled == ["a"] and rt.retries == 2
    assert consumer.commits == []  # handled, delivered, and left for the group to read again


class Holder(Recorder):
    """Holds the record of job "held" (as place holds a gang waiting for a host)."""

    def handle(self, records):
        super().handle(records)
        self.held = {(r.topic, r.partition): r.offset for r in records if r.value["job_id"] == "held"}

    def held_offsets(self):
        return self.held


def test_a_holding_stage_records_how_far_it_read_and_its_lag_counts_the_held_records() -> None:
    from peloton import metrics

    stage = Holder()
    batch = [Message(i, command(j)) for i, j in enumerate(["a", "held", "b", "c"])]
    rt, consumer, _out = runtime_for(stage, batch)
    rt._position_consumer = positions = Consumer([])
    rt.run_once()
    name = CAT["job-commands"].name
    assert consumer.commits == [{(name, 0): 1}]  # not past the held record
    assert positions.commits == [{(name, 0): 4}]  # but it has read all four
    labels = (rt.catalogue.group("recorder"), name, "0")
    assert metrics.LAG.labels(*labels)._value.get() == 3
    assert metrics.HELD.labels(*labels)._value.get() == 3
    assert metrics.LAG_SECONDS.labels(*labels)._value.get() > 0  # the held record's age
    rt.run_once()  # nothing new read: the position is not recorded again
    assert len(positions.commits) == 1
