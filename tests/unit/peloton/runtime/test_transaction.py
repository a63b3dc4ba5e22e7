"""The transaction of a batch, with a stand-in producer (a pure unit test: no broker): a failed
attempt is produced again whole in a new transaction, never handled again; a producer that is
finished gives way to a new one with the same id; a group that moved on gets the output without
the offsets. The real broker's side is tested end to end (tests/integration/test_kafka_failures)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from peloton.runtime.transaction import BatchTransaction, TransactionError


def error(code: int, *, fatal: bool = False, abort: bool = False, retriable: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, "test", fatal=fatal, retriable=retriable, txn_requires_abort=abort))


class Producer:
    """Records what reached the 'broker': messages and offsets of committed transactions only."""

    made = 0

    def __init__(self, fail: dict[str, list[KafkaException]] | None = None):
        Producer.made += 1
        self.fail = fail or {}
        self.open: list = []
        self.offsets: list = []
        self.committed: list = []  # (messages, offsets) per committed transaction
        self.calls: list[str] = []

    def _step(self, name: str) -> None:
        self.calls.append(name)
        failures = self.fail.get(name)
        if failures:
            raise failures.pop(0)

    def init_transactions(self, timeout):
        self._step("init")

    def begin_transaction(self):
        self._step("begin")
        self.open, self.offsets = [], []

    def produce(self, topic, value, key, partition, on_delivery=None):
        self._step("produce")
        self.open.append((topic, value))

    def send_offsets_to_transaction(self, offsets, metadata, timeout):
        self._step("offsets")
        self.offsets = [(tp.topic, tp.partition, tp.offset) for tp in offsets]

    def commit_transaction(self, timeout):
        self._step("commit")
        self.committed.append((self.open, self.offsets))
        self.open, self.offsets = [], []

    def abort_transaction(self, timeout):
        self._step("abort")
        self.open, self.offsets = [], []

    def flush(self, timeout=0):
        self._step("flush")
        return 0

    def purge(self):
        self.open = []

    def poll(self, timeout=0):
        return 0


OFFSETS = [TopicPartition("in", 0, 7)]


def commit_until_done(txn: BatchTransaction, offsets=OFFSETS, tries: int = 5) -> bool:
    for _ in range(tries):
        try:
            return txn.commit(offsets, lambda: "group-metadata")
        except TransactionError:
            continue
    raise AssertionError("did not commit")


def test_a_batchs_output_and_offsets_commit_in_one_transaction() -> None:
    producer = Producer()
    txn = BatchTransaction(lambda _: producer, 5)
    txn.produce("out", b"k", b"v1", 0, None)
    txn.produce("out", b"k", b"v2", 0, None)
    assert txn.commit(OFFSETS, lambda: "group-metadata")
    assert producer.committed == [([("out", b"v1"), ("out", b"v2")], [("in", 0, 7)])]
    assert txn.journal == [] and not txn.open


def test_a_failed_attempt_is_produced_again_whole_by_a_new_producer_and_commits_once() -> None:
    first = Producer({"commit": [error(KafkaError._TIMED_OUT, abort=True)]})
    second = Producer()
    producers = iter([first, second])
    txn = BatchTransaction(lambda _: next(producers), 5)
    txn.produce("out", b"k", b"v1", 0, None)
    with pytest.raises(TransactionError):
        txn.commit(OFFSETS, lambda: "group-metadata")
    assert first.committed == []  # nothing of the failed attempt is visible
    assert commit_until_done(txn)
    # the new producer's init aborted the attempt on the broker; it sent the journal again
    assert second.committed == [([("out", b"v1")], [("in", 0, 7)])]
    assert txn.aborts == 1 and txn.renewals == 1 and second.calls[0] == "init"


def test_a_retriable_failure_commits_on_the_next_call_without_producing_again() -> None:
    producer = Producer({"commit": [error(KafkaError._TIMED_OUT, retriable=True)]})
    txn = BatchTransaction(lambda _: producer, 5)
    txn.produce("out", b"k", b"v1", 0, None)
    assert commit_until_done(txn)
    assert producer.calls.count("produce") == 1 and producer.calls.count("offsets") == 1
    assert producer.committed == [([("out", b"v1")], [("in", 0, 7)])]


def test_a_finished_producer_gives_way_to_a_new_one_that_sends_the_journal() -> None:
    first = Producer({"commit": [error(KafkaError._FENCED, fatal=True)]})
    second = Producer()
    producers = iter([first, second])
    txn = BatchTransaction(lambda _: next(producers), 5)
    txn.produce("out", b"k", b"v1", 0, None)
    assert commit_until_done(txn)
    assert first.committed == [] and second.committed == [([("out", b"v1")], [("in", 0, 7)])]
    assert txn.renewals == 1


def test_a_group_that_moved_on_gets_the_output_without_the_offsets() -> None:
    first = Producer({"offsets": [error(KafkaError.ILLEGAL_GENERATION, abort=True)]})
    second = Producer()
    producers = iter([first, second])
    txn = BatchTransaction(lambda _: next(producers), 5)
    txn.produce("out", b"k", b"v1", 0, None)
    assert txn.commit(OFFSETS, lambda: "group-metadata") is False
    # the output is not lost; the partitions' next owner reads them again from the last commit
    assert second.committed == [([("out", b"v1")], [])]


def test_a_produce_that_fails_mid_batch_is_sent_again_with_the_rest() -> None:
    first = Producer({"produce": [error(KafkaError._STATE)]})
    second = Producer()
    producers = iter([first, second])
    txn = BatchTransaction(lambda _: next(producers), 5)
    txn.produce("out", b"k", b"v1", 0, None)  # fails: the transaction is broken
    txn.produce("out", b"k", b"v2", 0, None)  # kept for the next attempt
    assert commit_until_done(txn)
    assert second.committed == [([("out", b"v1"), ("out", b"v2")], [("in", 0, 7)])]


def test_output_not_yet_delivered_holds_the_offsets_back_and_the_next_attempt_takes_a_new_producer() -> None:
    first, second = Producer(), Producer()
    first.flush = lambda timeout=0: 3
    producers = iter([first, second])
    txn = BatchTransaction(lambda _: next(producers), 5)
    txn.produce("out", b"k", b"v1", 0, None)
    with pytest.raises(TransactionError, match="not delivered yet"):
        txn.commit(OFFSETS, lambda: "group-metadata")
    assert "offsets" not in first.calls  # offsets never go ahead of the output
    # The first producer may hold a coordinator that died with its broker: the journal goes again
    # through the second, whose init aborts the first attempt.
    assert commit_until_done(txn)
    assert first.committed == [] and second.committed == [([("out", b"v1")], [("in", 0, 7)])]
    assert txn.renewals == 1 and txn.aborts == 1


def test_offsets_that_fail_to_go_are_sent_by_a_new_producer_but_a_commit_is_asked_again_of_the_same() -> None:
    first = Producer({"offsets": [error(KafkaError._TRANSPORT, retriable=True)]})
    second = Producer({"commit": [error(KafkaError._TIMED_OUT, retriable=True)]})
    producers = iter([first, second, Producer()])  # the last one a spare, never used
    txn = BatchTransaction(lambda _: next(producers), 5)
    txn.produce("out", b"k", b"v1", 0, None)
    with pytest.raises(TransactionError):
        txn.commit(OFFSETS, lambda: "group-metadata")
    with pytest.raises(TransactionError):  # the commit timed out: it may have committed
        txn.commit(OFFSETS, lambda: "group-metadata")
    assert commit_until_done(txn)
    assert second.committed == [([("out", b"v1")], [("in", 0, 7)])]
    assert second.calls.count("produce") == 1 and txn.renewals == 1  # not produced a third time


def test_nothing_to_send_and_nothing_read_costs_no_transaction() -> None:
    producer = Producer()
    txn = BatchTransaction(lambda _: producer, 5)
    assert txn.commit([], lambda: "group-metadata")
    assert producer.calls == ["init"]


def test_a_broker_not_ready_at_start_delays_the_first_commit_and_ends_nothing() -> None:
    first = Producer({"init": [error(KafkaError._TIMED_OUT, retriable=True)]})
    producers = iter([first])
    txn = BatchTransaction(lambda _: next(producers), 5)  # does not raise: a stage must not exit
    txn.produce("out", b"k", b"v1", 0, None)
    assert commit_until_done(txn)
    assert first.committed == [([("out", b"v1")], [("in", 0, 7)])]  # its init resumed


def test_a_broker_that_falters_gets_the_next_producer_made_before_it_is_needed() -> None:
    first = Producer({"commit": [error(KafkaError._TIMED_OUT, retriable=True),
                                 error(KafkaError._TIMED_OUT, abort=True)]})
    made: list[Producer] = []

    def make(on_error) -> Producer:
        made.append(first if not made else Producer())
        return made[-1]

    txn = BatchTransaction(make, 5)
    txn.produce("out", b"k", b"v1", 0, None)
    with pytest.raises(TransactionError, match="not committed yet"):
        txn.commit(OFFSETS, lambda: "group-metadata")
    spare = made[-1]
    assert len(made) == 2 and spare.calls == []  # made, not initialised: it fences nothing yet
    with pytest.raises(TransactionError, match="goes again"):
        txn.commit(OFFSETS, lambda: "group-metadata")
    assert commit_until_done(txn)
    assert len(made) == 2 and spare.calls[0] == "init"  # the renewal took the spare
    assert spare.committed == [([("out", b"v1")], [("in", 0, 7)])]


def test_after_a_broker_went_away_offsets_that_wait_on_a_dead_coordinator_go_through_a_new_producer() -> None:
    import time

    class WaitsOnDeadCoordinator(Producer):
        def send_offsets_to_transaction(self, offsets, metadata, timeout):
            time.sleep(0.8)  # well within the usual wait, past the wait after a broker's loss
            super().send_offsets_to_transaction(offsets, metadata, timeout)

    first, second = WaitsOnDeadCoordinator(), Producer()
    errors = []

    def make(on_error) -> Producer:
        errors.append(on_error)
        return first if len(errors) == 1 else second

    txn = BatchTransaction(make, 5)
    txn.produce("out", b"k", b"v1", 0, None)
    errors[0](KafkaError(KafkaError._TRANSPORT, "broker 2 disconnected"))  # librdkafka's error_cb
    assert txn.suspect
    with pytest.raises(TransactionError, match="stuck"):
        txn.commit(OFFSETS, lambda: "group-metadata")
    assert commit_until_done(txn)
    assert second.committed == [([("out", b"v1")], [("in", 0, 7)])] and first.committed == []
    assert not txn.suspect  # a commit went through: the usual wait again


def test_an_init_that_timed_out_is_resumed_by_the_same_producer() -> None:
    first = Producer()
    second = Producer({"init": [error(KafkaError._TIMED_OUT, retriable=True)]})
    made = iter([first, second, Producer()])
    first.flush = lambda timeout=0: 3  # the broker falters: the next attempt renews the producer
    txn = BatchTransaction(lambda _: next(made), 5)
    txn.produce("out", b"k", b"v1", 0, None)
    for _ in range(2):  # the flush that failed, then the renewal whose init timed out
        with pytest.raises(TransactionError):
            txn.commit(OFFSETS, lambda: "group-metadata")
    assert commit_until_done(txn)
    assert second.calls.count("init") == 2  # called again: librdkafka resumes it
    assert second.committed == [([("out", b"v1")], [("in", 0, 7)])]
