"""Yardsticks for a broker's loss: plain Kafka clients run beside a job, whose longest waits say
how long the election lasted as a client lives it, so the job's own pause can be judged by them.

- WriteProbe: a producer with the stages' settings, writing;
- TransactProbe: a consume-transform-produce loop written the way Kafka's documentation writes
  one, committing its output and offsets in one transaction, with its transaction and its group
  coordinated by the broker that will be killed (the worst case a stage can meet)."""

from __future__ import annotations

import threading
import time
from itertools import pairwise

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from peloton.config import Settings
from peloton.runtime.clients import CONSUMER_RECOVERY, QUIET, producer_config
from pelotonctl.dev.coordinators import coordinated_by

PARTITIONS = 6
WRITTEN = "write-probe"
TRANSFORMED = "transact-probe"


def longest_gap(times: list[float]) -> float:
    return max((b - a for a, b in pairwise(times)), default=0.0)


def make_topic(admin: AdminClient, name: str) -> None:
    """Six partitions, replicated to three nodes."""
    admin.create_topics([NewTopic(name, PARTITIONS, 3)])[name].result()


class WriteProbe(threading.Thread):
    """A plain producer with the stages' settings (acks=all, RF 3, min.insync.replicas 2) writing to
    six partitions every 20 ms: its longest wait for an acknowledgement across a broker's loss is
    the election as a Kafka client lives it (the controller fences the node, the leaders move,
    the client learns them)."""

    def __init__(self, bootstrap: str):
        super().__init__(daemon=True)
        make_topic(AdminClient({"bootstrap.servers": bootstrap}), WRITTEN)
        self.producer = Producer({**producer_config(Settings(bootstrap=bootstrap)), **QUIET})
        self.acked: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.running = True

    def run(self) -> None:
        def acked(err, msg) -> None:
            if err is None:
                self.acked[msg.partition()].append(time.monotonic())
        while self.running:
            for partition in range(PARTITIONS):
                self.producer.produce(WRITTEN, b"-", partition=partition, on_delivery=acked)
            self.producer.poll(0.02)
        self.producer.flush(10)

    def finish(self) -> float:
        """The longest wait between two acknowledgements of one partition."""
        self.running = False
        self.join(15)
        return max(longest_gap(times) for times in self.acked.values())


class TransactProbe(threading.Thread):
    """Reads the write probe's topic in a group and, every 20 ms, writes a record to each of six
    partitions and commits them with its consumed offsets in one transaction, handling errors as
    confluent-kafka's documentation says (retry what is retriable, abort what needs an abort, a
    new producer after a fatal error) with the stages' client settings and nothing of the stages'
    own recovery. Its transaction and its group are coordinated by `node`, the broker to be
    killed. Its longest wait between two commits is the election as an exactly-once client lives
    it: leaders, the transaction's coordinator and the group's coordinator all moving."""

    CALL_S = 10.0  # each transactional call's timeout; a call that times out is retried (retriable)

    def __init__(self, bootstrap: str, node: int):
        """Reads WRITTEN: a WriteProbe's topic, made first."""
        super().__init__(daemon=True)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        make_topic(admin, TRANSFORMED)
        self.transactional_id = coordinated_by(admin, "__transaction_state", node, "transact-probe")
        self.group = coordinated_by(admin, "__consumer_offsets", node, "transact-probe-group")
        self.settings = Settings(bootstrap=bootstrap)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": self.group,
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "auto.offset.reset": "latest", **CONSUMER_RECOVERY, **QUIET})
        self.consumer.subscribe([WRITTEN])
        self.producer = self._producer()
        self.committed: list[float] = []
        self.errors: list[str] = []
        self.running = True

    def _producer(self) -> Producer:
        producer = Producer({**producer_config(self.settings, self.transactional_id), **QUIET})
        self._retried(lambda: producer.init_transactions(self.CALL_S))
        return producer

    def _retried(self, call) -> None:
        while True:
            try:
                return call()
            except KafkaException as e:
                if not e.args[0].retriable() or not self.running:
                    raise
                self.errors.append(f"{time.monotonic():.1f} retried: {e.args[0]}")

    def run(self) -> None:
        try:
            self._loop()
        except Exception as e:  # noqa: BLE001 - a probe that stops shows as its wait till the end
            self.errors.append(f"{time.monotonic():.1f} stopped: {e!r}")

    def _loop(self) -> None:
        while self.running:
            self.consumer.poll(0.02)
            assignment = self.consumer.assignment()
            if not assignment:
                continue
            try:
                self.producer.begin_transaction()
                for partition in range(PARTITIONS):
                    self.producer.produce(TRANSFORMED, b"-", partition=partition)
                positions = [tp for tp in self.consumer.position(assignment) if tp.offset >= 0]
                if positions:
                    self._retried(lambda positions=positions: self.producer.send_offsets_to_transaction(
                        positions, self.consumer.consumer_group_metadata(), self.CALL_S))
                self._retried(lambda: self.producer.commit_transaction(self.CALL_S))
                self.committed.append(time.monotonic())
            except KafkaException as e:
                error = e.args[0]
                kind = "abort" if error.txn_requires_abort() else "fatal" if error.fatal() else "failed"
                self.errors.append(f"{time.monotonic():.1f} {kind}: {error}")
                if not self.running:
                    break
                if error.txn_requires_abort():
                    # A real loop would rewind its consumer to the committed offsets; this one's
                    # output is never read, so it goes on from where it is.
                    self._retried(lambda: self.producer.abort_transaction(self.CALL_S))
                else:  # the documentation's answer to a fatal error; another is not expected here
                    self.producer = self._producer()

    def finish(self) -> float:
        """The longest wait between two commits, or since the last one if it stopped committing."""
        until = time.monotonic()
        self.running = False
        self.join(30)
        self.consumer.close()
        return longest_gap(self.committed + [until])
