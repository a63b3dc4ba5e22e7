"""One Kafka transaction per batch: what a stage produced for a batch and the offsets it consumed
commit together, or neither does (Kafka's consume-transform-produce, KIP-98 and KIP-447).

The stage decides once. Its decisions are already in the store and in its memory when the
transaction commits, so a transaction that fails is not handled again: the messages it held are
kept here (`journal`) and produced again in a new transaction, with the same offsets, until one
commits. Readers (read_committed) never see the messages of an aborted attempt, so a retry leaves
no duplicate behind, and a stage killed mid-transaction leaves none either: its open transaction
is aborted (by the next producer with its transactional id, or by the coordinator after
`transaction.timeout.ms`) and the next owner of its partitions reads again from the last commit.

librdkafka's three kinds of transaction error, and what each means here:
- retriable: the broker is slow or away: call the same step again (the caller's retry loop);
- abortable or fatal: this attempt is lost: a new producer takes the transactional id (which
  aborts the attempt on the broker), produces the journal again and commits again. When the
  group has moved on (a rebalance fenced this member), the offsets can no longer commit: the
  journal goes without them, and whoever owns those partitions now reads them again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

# What librdkafka calls with each message's delivery report: (error or None, message).
OnDelivery = Callable[[KafkaError | None, Message], None]

log = logging.getLogger("peloton.transaction")

# A rebalance fenced this member: its offsets cannot commit, but its output still must go.
_GROUP_FENCED = {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.FENCED_INSTANCE_ID,
                 KafkaError.REBALANCE_IN_PROGRESS}


# How long one transactional call may wait (the transaction itself may live longer: its timeout is
# the producer's transaction.timeout.ms). Short, so a broker that died under a call costs the
# batch seconds: losing one broker of three paused a job 6.4-27.9 s at 5 s (three runs, the stages
# stuck one after another), 4.8-13.5 s at 3 s (four runs).
CALL_TIMEOUT_S = 3.0
# send_offsets_to_transaction waits less, and counts as stuck this much past its timeout: it can
# wait past its timeout when a coordinator moves (librdkafka #5456, #5511), seen starting after
# the election and costing the job the whole 3 s + 1 s. It is a few round trips that take
# milliseconds when the broker is well, and abandoning a slow one costs an abort and a resend.
OFFSETS_TIMEOUT_S = 1.5
OFFSETS_GRACE_S = 0.5
# ... and less again once a broker went away since the last commit: a producer keeps the group
# coordinator it last used, and asks that broker, even when it died and another took its
# groups, until the broker is back (librdkafka's coordinator cache). In the three-broker test a
# stage waited the whole 1.5 s + 0.5 s after the election for it, where a new producer found the
# new coordinator in 5 ms.
SUSPECT_OFFSETS_TIMEOUT_S = 0.3
SUSPECT_OFFSETS_GRACE_S = 0.2


class TransactionError(RuntimeError):
    """The transaction did not commit yet (the broker is slow or away); try the commit again."""


def _error(exc: KafkaException) -> KafkaError | None:
    err = exc.args[0] if exc.args else None
    return err if isinstance(err, KafkaError) else None


class BatchTransaction:
    """The transactional producer of one stage instance and the transaction of its current batch."""

    def __init__(self, make_producer: Callable[[Callable[[KafkaError], None]], Producer], timeout_s: float):
        # make_producer(on_error): a producer whose client errors (a broker gone, all brokers
        # down) go to on_error, librdkafka's error_cb
        self.make_producer = make_producer
        self.suspect = False  # a broker went away since the last commit (see SUSPECT_OFFSETS_TIMEOUT_S)
        self.timeout_s = min(timeout_s, CALL_TIMEOUT_S)  # for each call
        self.open = False
        self.journal: list[tuple[str, bytes | None, bytes, int]] = []  # (topic, key, value, partition)
        self._broken = False  # an attempt failed mid-way: a new producer sends the journal again
        self._spare: Producer | None = None  # the next producer, made when the broker faltered
        self.producer: Producer | None = None
        try:
            self.producer = self._new_producer()
        except KafkaException as exc:  # the broker is away or still loading: the first commit tries again
            log.warning("transaction: no producer yet (%s); trying again at the first commit", exc)
            self._broken = True
        self._offsets_sent = False
        self.commits = 0
        self.aborts = 0  # attempts aborted and produced again
        self.renewals = 0  # producers replaced after a failed attempt
        self._stuck: list[Producer] = []  # producers left inside a call that never returned

    def _broker_trouble(self, err: KafkaError) -> None:
        self.suspect = True

    def _new_producer(self) -> Producer:
        producer, self._spare = self._spare or self.make_producer(self._broker_trouble), None
        # Fences an earlier producer of the same id (a zombie of this instance) and aborts the
        # transaction it left open, so its messages never reach a reader.
        try:
            producer.init_transactions(self.timeout_s)
        except KafkaException as exc:
            err = _error(exc)
            if err is not None and err.retriable():
                # Timed out (the coordinator is moving, or aborting what the last producer left):
                # the same producer resumes its init at the next attempt, where a new one would
                # start over (connections, coordinator lookup, the abort's wait).
                self._spare = producer
            raise
        return producer

    # -- producing --------------------------------------------------------------------------
    def produce(self, topic: str, key: bytes | None, value: bytes, partition: int,
                on_delivery: OnDelivery | None) -> None:
        self.journal.append((topic, key, value, partition))
        producer = self.producer
        if self._broken or producer is None:  # no producer only while broken
            return  # goes with the journal after the abort
        try:
            self._begin(producer)
            self._produce(producer, topic, key, value, partition, on_delivery)
        except KafkaException as exc:
            log.warning("transaction: produce failed (%s); the batch's output goes again after an abort", exc)
            self._broken = True

    def _begin(self, producer: Producer) -> None:
        if not self.open:
            producer.begin_transaction()
            self.open = True
            self._offsets_sent = False

    @staticmethod
    def _produce(producer: Producer, topic: str, key: bytes | None, value: bytes, partition: int,
                 on_delivery: OnDelivery | None = None) -> None:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
                return
            except BufferError:  # local queue full: let librdkafka drain, then retry
                producer.poll(0.05)

    # -- committing -------------------------------------------------------------------------
    def commit(self, offsets: list[TopicPartition], group_metadata: Callable[[], Any]) -> bool:
        """Commit the open transaction with `offsets` (the consumed positions). True when the
        offsets committed with the output; False when the group had fenced this member, so the
        output went alone. Raises TransactionError when it should be called again."""
        if not self.open and not offsets and not self.journal:
            return True
        committing = False
        try:
            producer = self.producer
            if self._broken or producer is None:  # no producer only while broken
                producer = self._again()
            self._begin(producer)
            # Every message delivered first: a delivery that fails puts the transaction in its
            # abortable state before the offsets go, not while they go (librdkafka 2.16 can then
            # wait in send_offsets_to_transaction for ever).
            remaining = producer.flush(self.timeout_s)
            if remaining:
                self._faltered()
                raise TransactionError(f"{remaining} messages of the transaction not delivered yet")
            if offsets and not self._offsets_sent:
                timeout, grace = ((SUSPECT_OFFSETS_TIMEOUT_S, SUSPECT_OFFSETS_GRACE_S) if self.suspect
                                  else (OFFSETS_TIMEOUT_S, OFFSETS_GRACE_S))
                self._guarded(producer.send_offsets_to_transaction, offsets, group_metadata(),
                              timeout=min(self.timeout_s, timeout), grace=grace)
                self._offsets_sent = True
            committing = True
            # Not guarded: it keeps its timeout (then it is retriable and called again), and a
            # commit abandoned as stuck might have committed: producing its journal again would
            # leave the output twice.
            producer.commit_transaction(self.timeout_s)
        except KafkaException as exc:
            err = _error(exc)
            if err is not None and (err.fatal() or err.txn_requires_abort()):
                self._broken = True
                if err.code() in _GROUP_FENCED:
                    log.warning("transaction: the group moved on (%s); the output goes without its offsets",
                                err.name())
                    self.commit([], group_metadata)
                    return False
                raise TransactionError(f"transaction failed ({err.name()}); its output goes again") from None
            if committing:
                self._prepare_spare()  # the same commit is called again, on the same producer
            else:
                self._faltered()
            raise TransactionError(f"transaction not committed yet: {exc}") from None
        self.open = False
        self._offsets_sent = False
        self.journal = []
        self.commits += 1
        self.suspect = False
        return True

    def _guarded(self, call: Callable[..., object], *args: object, timeout: float, grace: float) -> None:
        """Run a transactional call, but not for ever: librdkafka 2.16 can wait in
        send_offsets_to_transaction past its timeout when the broker dies between the
        AddOffsetsToTxn and TxnOffsetCommit requests. A call that overstays is left to its thread
        and its producer replaced (the new one fences it), so the stage goes on."""
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                call(*args, timeout)
                outcome.append(None)
            except BaseException as exc:  # handed to the caller's thread
                outcome.append(exc)

        worker = threading.Thread(target=run, name="txn-call", daemon=True)
        worker.start()
        worker.join(timeout + grace)
        if not outcome:
            self._prepare_spare()
            log.warning("transaction: %s is stuck past its timeout; a new producer takes over",
                        getattr(call, "__name__", "a call"))
            if self.producer is not None:  # kept so its thread never meets a freed client
                self._stuck.append(self.producer)
            self.producer = None
            self._broken = True
            raise TransactionError("a transactional call got stuck; a new producer takes over")
        if outcome[0] is not None:
            raise outcome[0]

    def _faltered(self) -> None:
        """The broker faltered before the commit was asked for: the next attempt starts over with a
        new producer (its journal again, the old attempt aborted). The old one keeps what it
        learnt while the broker was away: a coordinator that died stays in its cache, and its
        send_offsets_to_transaction then waited for that broker 2 s past the election (seen in
        the three-broker test, where a new producer found the new coordinator in 5 ms)."""
        self._prepare_spare()
        self._broken = True
        self.suspect = True

    def _prepare_spare(self) -> None:
        """The broker falters: make the next producer now, so that a renewal, if one follows, finds
        its connections open. Not initialised yet, it fences nothing. A producer made at the
        renewal waited 0.5 s for its first broker before it looked up its coordinator."""
        if self._spare is None:
            self._spare = self.make_producer(self._broker_trouble)

    def _again(self) -> Producer:
        """Drop the failed attempt and produce what it held again in a new transaction, with a new
        producer under the same id: its init aborts what the old one left open (so no reader
        sees it), and it starts with no sequence numbers of messages that may never have landed.
        Returns the new producer. Raises KafkaException when the broker is not ready for it
        (commit classifies it)."""
        if self.open:
            self.aborts += 1
        producer = self._renew()
        self._begin(producer)
        for topic, key, value, partition in self.journal:
            self._produce(producer, topic, key, value, partition)
        self._broken = False
        return producer

    def _renew(self) -> Producer:
        old, self.producer = self.producer, None
        self.open = False
        self._offsets_sent = False
        if old is not None:
            try:
                old.purge()  # its queued messages belong to the failed attempt
                old.flush(0)
            except Exception:
                pass
            del old
        self.renewals += 1
        try:
            self.producer = producer = self._new_producer()
        except KafkaException as exc:  # the broker is away: the next commit tries again
            raise TransactionError(f"no new producer yet: {exc}") from None
        return producer

    def close(self, timeout: float = 10.0) -> None:
        """Leave: an open transaction is aborted (nothing of it was committed)."""
        self._spare = None  # never initialised: nothing of it on the broker
        if self.producer is None:
            return
        if self.open:
            with contextlib.suppress(KafkaException):
                self.producer.abort_transaction(timeout)
        self.producer.flush(timeout)
