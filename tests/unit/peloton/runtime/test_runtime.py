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

    def headers(self):
        return None  # as confluent-kafka gives a message without headers

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

    def poll(self, timeout):  # the loop waits for a first message this way when none has come
        return self.batch.pop(0) if self.batch else None

    def commit(self, offsets, asynchronous):
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})
        self.metadata = {(tp.topic, tp.partition): tp.metadata for tp in offsets}

    def get_watermark_offsets(self, tp, cached):
        return (0, self.end)

    def position(self, parts):
        return [type(tp)(tp.topic, tp.partition, -1001) for tp in parts]  # none known: no marker read

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
                "task_id": r.value["job_id"], "job_id": r.value["job_id"], "pool": "/p", "reason": "",
                "timestamp_ms": 1})


def runtime_for(stage: Stage, batch, **settings) -> tuple[StageRuntime, Consumer, RecordingEmitter]:
    # At least once: the transactional path is tested with a stand-in producer (test_transaction).
    settings = Settings(bootstrap="127.0.0.1:9", retry_min_s=0.01, retry_max_s=0.02, metrics_port=-1,
                        exactly_once=False, **settings)
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


def test_a_batch_whose_output_waited_for_the_broker_is_committed_once_it_was_delivered() -> None:
    """The broker away while a batch's output waits: the batch is not handled again, and its
    offsets commit once the output is delivered (Kafka keeps its log across an outage)."""
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
    assert consumer.commits == [{(CAT["job-commands"].name, 0): 5}]


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
    rt.run_once()
    name = CAT["job-commands"].name
    assert consumer.commits == [{(name, 0): 1}]  # not past the held record
    assert consumer.metadata == {(name, 0): "read=4"}  # but it has read all four, as the commit says
    labels = (rt.catalogue.group("recorder"), name, "0")
    assert metrics.LAG.labels(*labels)._value.get() == 3
    assert metrics.HELD.labels(*labels)._value.get() == 3
    assert metrics.LAG_SECONDS.labels(*labels)._value.get() > 0  # the held record's age
    rt.run_once()  # nothing new read: nothing committed again
    assert len(consumer.commits) == 1


class Weigher(Recorder):
    """Each record brings as many tasks as its job id's number says ("a2": two)."""

    def weight(self, record):
        return int(record.value["job_id"][1:])


def test_a_turn_ends_where_its_records_bring_too_many_tasks_and_the_rest_come_next_in_order() -> None:
    # A backlog of creates read at once would make every task of them in one turn (admit: about
    # 1.7 KB a task until the turn commits); the turn stops at max_turn_tasks instead.
    stage = Weigher()
    batch = [Message(0, command("a2")), Message(0, command("d1"), partition=1), Message(1, command("b2")),
             Message(2, command("c2")), Message(1, command("e9"), partition=1), Message(3, command("f1"))]
    rt, consumer, _out = runtime_for(stage, batch, max_turn_tasks=5)
    rt.assigned = {("job-commands", 0), ("job-commands", 1)}
    name = CAT["job-commands"].name
    rt.run_once()
    assert stage.handled == ["a2", "d1", "b2"]  # 5 tasks; c2 would make 7
    assert consumer.commits[-1] == {(name, 0): 2, (name, 1): 1}  # nothing past what was handled
    rt.run_once()
    assert stage.handled[3:] == ["c2"]  # e9 would pass the bound: it waits
    assert consumer.commits[-1] == {(name, 0): 3}
    rt.run_once()
    assert stage.handled[4:] == ["e9"]  # above the bound alone, it still goes: nothing waits for ever
    rt.run_once()
    assert stage.handled[5:] == ["f1"]
    assert consumer.commits[-1] == {(name, 0): 4}
    assert [c for c in consumer.commits if (name, 1) in c][-1][(name, 1)] == 2


def test_a_partition_with_messages_carried_is_not_committed_past_them_whatever_the_consumer_read() -> None:
    # The consumer's position is past a carried message (it was fetched); the commit that moves
    # past transaction markers must not take it for handled (a job manager killed then lost the
    # creates it carried: found by the backlog integration test).
    stage = Weigher()
    batch = [Message(0, command("a4")), Message(1, command("b4")), Message(2, command("c4"))]
    rt, consumer, _out = runtime_for(stage, batch, max_turn_tasks=5)
    consumer.position = lambda parts: [type(tp)(tp.topic, tp.partition, 3) for tp in parts]  # all fetched
    name = CAT["job-commands"].name
    rt.run_once()
    assert stage.handled == ["a4"] and consumer.commits[-1] == {(name, 0): 1}
    rt.run_once()
    assert stage.handled == ["a4", "b4"] and consumer.commits[-1] == {(name, 0): 2}
    rt.run_once()
    assert stage.handled == ["a4", "b4", "c4"] and consumer.commits[-1] == {(name, 0): 3}


def test_a_record_left_for_the_next_turn_is_dropped_with_its_partition_for_its_next_owner() -> None:
    stage = Weigher()
    batch = [Message(0, command("a4")), Message(0, command("b4"), partition=1), Message(1, command("c4"))]
    rt, consumer, _out = runtime_for(stage, batch, max_turn_tasks=5)
    rt.assigned = {("job-commands", 0), ("job-commands", 1)}
    rt.run_once()
    assert stage.handled == ["a4"]
    rt._forget([("job-commands", 1)], "revoked")  # its next owner reads b4 from the last commit
    rt.run_once()
    rt.run_once()
    assert stage.handled == ["a4", "c4"]


def test_a_stage_that_does_not_weigh_its_records_takes_its_whole_batch() -> None:
    stage = Recorder()
    rt, _consumer, _out = runtime_for(stage, [Message(i, command(f"j{i}")) for i in range(8)], max_turn_tasks=2)
    rt.run_once()
    assert len(stage.handled) == 8


# -- bundles: what a batch sends for one key goes as one message, and is read back record by record --
def status(job_id: str, instance: int, state: str = "TASK_RUNNING") -> dict:
    return {"event_id": f"e{instance}", "task_id": f"{job_id}-{instance}-1", "job_id": job_id, "instance": instance,
            "run_id": 1, "host_id": "h", "state": state, "reason": "", "message": "", "exit_code": None,
            "signal": None, "timestamp_ms": 1, "health": ""}


def progress(job_id: str) -> dict:
    return {"event_id": "p", "job_id": job_id, "state": "PLACED", "runs": [], "timestamp_ms": 1}


def messages_of(emitter: RecordingEmitter) -> list[tuple[str, str, int]]:
    """(key, schema, records in it) of each message the emitter would send."""
    out = []
    for _topic, key, value, _partition in emitter._messages():
        schema, decoded = registry().decode(value)
        out.append((key.decode(), schema, len(decoded.get("statuses", [decoded]))))
    return out


def test_a_batchs_records_of_one_key_go_as_one_bundle_and_each_partition_keeps_its_order() -> None:
    out = RecordingEmitter()
    out.holding = True
    for i in range(3):
        out.emit("task-status", "a", "peloton.TaskStatus", status("a", i))
    out.emit("task-status", "a", "peloton.TaskProgress", progress("a"))  # no bundle schema: it ends the run
    out.emit("task-status", "a", "peloton.TaskStatus", status("a", 3))
    out.emit("task-status", "a", "peloton.TaskStatus", status("a", 4))
    out.emit("task-status", "b", "peloton.TaskStatus", status("b", 0))  # another key: its own message
    assert messages_of(out) == [("a", "peloton.TaskStatuses", 3), ("a", "peloton.TaskProgress", 1),
                                ("a", "peloton.TaskStatuses", 2), ("b", "peloton.TaskStatus", 1)]


def test_a_bundle_stays_within_its_record_count_and_the_message_limit() -> None:
    from peloton.runtime import BUNDLE_MAX_ITEMS

    out = RecordingEmitter()
    out.holding = True
    for i in range(BUNDLE_MAX_ITEMS * 2 + 7):
        out.emit("task-status", "a", "peloton.TaskStatus", status("a", i))
    assert [n for _, _, n in messages_of(out)] == [BUNDLE_MAX_ITEMS, BUNDLE_MAX_ITEMS, 7]
    small = RecordingEmitter(max_bytes=200)
    small.holding = True
    for i in range(40):
        small.emit("task-status", "a", "peloton.TaskStatus", status("a", i))
    sizes = [len(key) + len(value) for _, key, value, _ in small._messages()]
    assert len(sizes) > 4 and max(sizes) <= 200
    # Not holding (pelotonctl, a callback): each record goes at once, alone.
    now = RecordingEmitter()
    now.emit("task-status", "a", "peloton.TaskStatus", status("a", 0))
    now.emit("task-status", "a", "peloton.TaskStatus", status("a", 1))
    assert now.messages == [("task-status", "peloton.TaskStatus")] * 2


class StatusRecorder(Stage):
    """Records the statuses it handles; the status of run a-1-1 breaks its handler."""

    name = "recorder"
    inputs = ("task-status",)

    def __init__(self):
        self.handled = []

    def handle(self, records):
        if any(r.value["task_id"] == "a-1-1" for r in records):
            raise KeyError("something the handler did not expect")
        self.handled.extend((r.value["instance"], r.offset, r.index) for r in records)


def bundle_message(offset: int, statuses: list[dict]) -> Message:
    out = RecordingEmitter()
    out.holding = True
    for s in statuses:
        out.emit("task-status", s["job_id"], "peloton.TaskStatus", s)
    [(_, _, value, _)] = out._messages()
    return Message(offset, value, topic="task-status")


def test_a_bundle_is_handled_record_by_record_and_a_bad_record_costs_only_itself() -> None:
    stage = StatusRecorder()
    rt, consumer, out = runtime_for(stage, [bundle_message(5, [status("a", i) for i in range(4)])])
    rt.assigned = {("task-status", 0)}
    rt.run_once()
    assert stage.handled == [(0, 5, 0), (2, 5, 2), (3, 5, 3)]
    [(_, _, _, letter)] = out.take("dead-letters")
    assert letter["offset"] == 5 and "KeyError" in letter["reason"]
    assert registry().decode(letter["value"]) == ("peloton.TaskStatus", status("a", 1))  # that record alone
    assert consumer.commits == [{(CAT["task-status"].name, 0): 6}]


def test_the_next_poll_asks_for_about_a_batch_of_records_however_they_are_bundled() -> None:
    from peloton.runtime import BUNDLE_MAX_ITEMS

    stage = StatusRecorder()
    big = [bundle_message(i, [status("b", i * BUNDLE_MAX_ITEMS + j) for j in range(BUNDLE_MAX_ITEMS)])
           for i in range(4)]
    rt, consumer, _ = runtime_for(stage, big)
    asked = []
    consume = consumer.consume
    consumer.consume = lambda n, timeout: asked.append(n) or consume(n, timeout)
    for _ in range(3):
        rt.run_once()
    assert len(stage.handled) == 4 * BUNDLE_MAX_ITEMS
    assert asked[0] == rt.settings.max_batch and asked[-1] < rt.settings.max_batch / 10


def test_a_holding_stage_that_committed_only_0_still_notices_the_log_was_lost() -> None:
    """Place may commit 0 on a partition for a long while (a gang held from the first bundle), with
    how far it read in the commit's metadata: a group that forgot that commit lost its log (a
    wiped cluster, or topics an operator deleted)."""
    from confluent_kafka import TopicPartition

    class Committed:
        def __init__(self, offset):
            self.offset = offset

        def committed(self, parts, timeout):
            return [TopicPartition(tp.topic, tp.partition, self.offset) for tp in parts]

    rt, _, _ = runtime_for(Recorder(), [])
    assert not rt._offsets_wiped()  # nothing committed yet: nothing to have lost
    rt._remember([TopicPartition(CAT["job-commands"].name, 0, 0, metadata="read=3")])
    rt.consumer = Committed(0)
    assert not rt._offsets_wiped()
    rt.consumer = Committed(-1001)  # OFFSET_INVALID: the group is unknown
    assert rt._offsets_wiped() and rt.offsets.ever_committed == {}


def test_the_commit_moves_past_a_transactions_marker_once_the_consumer_has_read_it() -> None:
    """A transaction's commit marker has an offset of its own after its last record: committing
    only up to the record would leave a lag of 1 behind every transaction."""
    stage = Recorder()
    rt, consumer, _out = runtime_for(stage, [Message(0, command("a")), Message(1, command("b"))])
    consumer.position = lambda parts: [type(tp)(tp.topic, tp.partition, 3) for tp in parts]  # read past offset 2
    rt.run_once()
    assert consumer.commits == [{(CAT["job-commands"].name, 0): 3}]


def test_an_instance_without_partitions_joins_again_only_when_its_group_does_not_list_it(monkeypatch) -> None:
    import peloton.runtime.loop as loop

    rt, _consumer, _emitter = runtime_for(Stage(), [])
    rt.assigned = set()
    asked, rejoined = [], []
    answers = iter([None, True, False])  # the broker away, a member with nothing to do, left out
    monkeypatch.setattr(rt, "_is_member", lambda: asked.append(1) or next(answers))
    monkeypatch.setattr(rt, "_rejoin", lambda idle_s: rejoined.append(idle_s))
    clock = [1000.0]
    monkeypatch.setattr(loop.time, "monotonic", lambda: clock[0])
    rt._check_membership()  # the first turn without partitions: not yet
    clock[0] += loop.REJOIN_AFTER_S - 1
    rt._check_membership()
    assert asked == [] and rejoined == []
    for _ in range(3):  # then once every REJOIN_AFTER_S
        clock[0] += loop.REJOIN_AFTER_S
        rt._check_membership()
    assert len(asked) == 3 and len(rejoined) == 1 and rejoined[0] >= 3 * loop.REJOIN_AFTER_S
    rt.assigned = {("job-commands", 0)}
    rt._check_membership()  # partitions again: the clock starts over
    assert rt.membership.unassigned_since is None


def test_a_group_asked_about_where_no_broker_answers_is_not_known_and_the_asker_lives() -> None:
    """The question goes to a child process (librdkafka's coordinator requests can abort the
    process that makes them); a child that fails or dies means "not known", never an exception."""
    from peloton.runtime.membership import group_members

    assert group_members(Settings(bootstrap="127.0.0.1:9"), "no-such-group") is None


def test_a_garbled_answer_or_no_child_process_is_not_known_either(monkeypatch) -> None:
    import subprocess

    import peloton.runtime.membership as membership

    monkeypatch.setattr(membership.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout="half a line", stderr=""))
    assert membership.group_members(Settings(), "g") is None

    def no_process(*_a, **_k):
        raise OSError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(membership.subprocess, "run", no_process)
    assert membership.group_members(Settings(), "g") is None
