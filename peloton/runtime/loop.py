"""The loop every stage instance runs: poll a batch, decode it, let the stage handle it, flush
what it produced and commit the offsets (never past a record the stage holds), with the
rebalance callbacks, the broker checks and the lag it exports around it."""

from __future__ import annotations

import logging
import signal
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from peloton import metrics
from peloton.config import Settings
from peloton.runtime.broker import BrokerQuestions
from peloton.runtime.clients import (
    CONSUMER_RECOVERY,
    FETCH_WAIT_MS,
    debug_config,
    kafka_access,
    producer_config,
)
from peloton.runtime.emitter import Emitter
from peloton.runtime.errors import is_transient
from peloton.runtime.lag import export_lag
from peloton.runtime.membership import MembershipWatch, group_members
from peloton.runtime.offsets import OffsetBook
from peloton.runtime.record import Record, WrongSchema, decode_message
from peloton.runtime.stage import Stage, handle_batch
from peloton.runtime.stuck import StuckWatch
from peloton.runtime.transaction import BatchTransaction
from peloton.serde import DecodeError, registry
from peloton.topics import Catalogue

if TYPE_CHECKING:

    from peloton.registry import Registry

log = logging.getLogger("peloton.runtime")


# How often the loop says it is alive, with what it has and what it did since (INFO).
STATUS_EVERY_S = 30.0
# An instance that has held no partition this long asks the broker whether it is in its group at
# all, and joins again with a new consumer if it is not: librdkafka can stay out of its group
# after its session ended while every broker was down, the group going on without it.
REJOIN_AFTER_S = 30.0


class StageRuntime:
    def __init__(self, stage: Stage, settings: Settings, instance_id: str | None = None):
        self.stage = stage
        metrics.at_zero(metrics.RETRIES, (stage.name,))
        self.settings = settings
        self.catalogue = Catalogue(settings.topic_prefix)
        self.serde = registry()
        self.instance_id = instance_id or f"{stage.name}-{uuid.uuid4().hex[:8]}"
        self._running = True
        self.consumer = self._new_consumer()
        # With exactly_once, the transaction's own producer, replaced after a failed attempt.
        self.transaction, self.producer = stage_output(settings, self.catalogue.group(stage.name), self.instance_id)
        self.emitter = Emitter(self.producer, self.catalogue, self.serde, stage.name, settings.max_message_bytes,
                               self.transaction)
        stage.bind(self.emitter, settings, self.catalogue)
        # The stage's stand-alone answers give way to the broker's.
        stage.caught_up = self.caught_up  # type: ignore[method-assign]
        stage.ends = self.ends  # type: ignore[method-assign]
        self.offsets = OffsetBook(self.catalogue)
        # (offset, produce time ms) of recent messages read per partition, for lag in seconds
        self._read_times: dict[tuple[str, int], deque[tuple[int, int]]] = {}
        self._lag_labels: set[tuple[str, str, str]] = set()
        self._next_lag_export = 0.0
        self.metrics_address = metrics.serve(settings)
        self.assigned: set[tuple[str, int]] = set()
        self.batches = 0
        self.records = 0
        self.failed_records = 0  # handled alone, raised, dead-lettered
        self.retries = 0  # pauses for an unavailable broker or store
        self.recoveries = 0  # times the broker was found to have lost everything
        self._next_topic_check = 0.0
        self._topics_checked = False
        self.broker = BrokerQuestions(settings, self.catalogue)
        self._consume_errors = 0
        self._per_message = 1.0  # records per message read lately (bundles hold many)
        # Messages read but left for the next turn, in the order read: a turn ends where its
        # records' weight passes max_turn_tasks (Stage.weight; only stages that weigh theirs).
        self._carry: list[Message] = []
        self._weigh = stage.weight if type(stage).weight is not Stage.weight else None
        self.membership = MembershipWatch(REJOIN_AFTER_S)
        self.rejoins = 0  # times a new consumer joined because the old one was out of its group
        self.registry = self._register()

    def _new_consumer(self) -> Consumer:
        return stage_consumer(self.settings, self.catalogue, self.stage, self.instance_id)

    def _register(self) -> Registry | None:
        from peloton.registry import join

        return join(self.settings.zookeeper, self.stage.name, self.instance_id, {
            "group": self.catalogue.group(self.stage.name), "partitions": [], "metrics": self.metrics_address},
            auth=self.settings.zookeeper_auth)

    def _registry_partitions(self) -> None:
        if self.registry is not None:
            self.registry.update({"partitions": sorted(self.assigned)})

    # -- rebalance ------------------------------------------------------------------------
    def _ids(self, partitions: Iterable[TopicPartition]) -> list[tuple[str, int]]:
        return [(self.catalogue.by_name[tp.topic].id, tp.partition) for tp in partitions]

    def _partition_of(self, msg: Message) -> tuple[str, int]:
        """A message's (topic id, partition)."""
        # A message the consumer read has both (the stub's Optionals are for one made by hand).
        return self.catalogue.by_name[msg.topic()].id, msg.partition()  # type: ignore[index, return-value]

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        ids = self._ids(partitions)
        self.assigned.update(ids)
        log.info("%s assigned %s", self.instance_id, ids)
        self._registry_partitions()
        wiped = bool(ids) and self._offsets_wiped()
        self._until_done(lambda: self.stage.on_assign(ids), "taking over partitions")
        if wiped:
            log.warning("%s: every offset this instance committed is gone: the broker lost its log "
                        "(restarted empty?); sending again from the store what may be lost", self.instance_id)
            self.recoveries += 1
            for view in self.stage.views():
                view.rewind()
            self._until_done(self.stage.recover, "recovering after the broker lost its log")

    def _offsets_wiped(self) -> bool:
        return self.offsets.wiped(self.consumer)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        ids = self._ids(partitions)
        # Everything handled so far is flushed and committed at the end of each loop, so the next
        # owner starts exactly after it; only held messages are read again.
        try:
            self._flush_and_commit()
        except Exception as exc:  # the next owner redoes what was not committed
            log.warning("commit before giving up partitions failed: %s", exc)
        self._forget(ids, "revoked")

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The group already gave these away (this member missed its session timeout): a commit
        # would be refused, so drop them; the next owner reads again from the last commit.
        self._forget(self._ids(partitions), "lost")

    def _forget(self, ids: list[tuple[str, int]], how: str) -> None:
        self.assigned.difference_update(ids)
        gone = set(ids)  # their next owner reads them from the last commit, carried ones too
        self._carry = [m for m in self._carry if self._partition_of(m) not in gone]
        for tp in ids:
            self._read_times.pop(tp, None)
        self.offsets.forget(ids)
        log.info("%s %s %s", self.instance_id, how, ids)
        self._registry_partitions()
        self.stage.on_revoke(ids)

    # -- membership -------------------------------------------------------------------------
    def _check_membership(self) -> None:
        """A member with no partition for REJOIN_AFTER_S that its group does not list joins again."""
        idle = self.membership.due(bool(self.assigned), time.monotonic())
        if idle is not None and self._is_member() is False:
            self._rejoin(idle)

    def _is_member(self) -> bool | None:
        """Whether the group, settled, lists this instance's consumer; None when the broker does
        not say (away, or the group is rebalancing: a joining member is not listed yet)."""
        desc = group_members(self.settings, self.catalogue.group(self.stage.name))  # in a child process
        if desc is None or desc["state"] not in ("STABLE", "EMPTY", "DEAD"):
            return None
        return self.instance_id in desc["client_ids"]

    def _rejoin(self, idle_s: float) -> None:
        log.warning("%s has held no partition for %.0fs and group %s does not list it: joining again with a "
                    "new consumer", self.instance_id, idle_s, self.catalogue.group(self.stage.name))
        old, self.consumer = self.consumer, self._new_consumer()
        try:
            old.close()
        except Exception as exc:
            log.warning("closing the consumer left out of its group: %s", exc)
        self._subscribe()
        self.membership.rejoined(time.monotonic())
        self.rejoins += 1

    # -- main loop ------------------------------------------------------------------------
    def stop(self, *_args: object) -> None:
        self._running = False

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def _subscribe(self) -> None:
        topics = [self.catalogue[t].name for t in self.stage.inputs]
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def run(self, max_seconds: float | None = None) -> None:
        self._subscribe()
        deadline = time.monotonic() + max_seconds if max_seconds else None
        self._status_at, self._status_records, self._status_turns = time.monotonic(), 0, 0
        watch = StuckWatch()  # a turn stuck for a minute writes every thread's stack to the log
        try:
            while self._running and (deadline is None or time.monotonic() < deadline):
                watch.turn()
                self.run_once()
                self._status()
        finally:
            watch.stop()
            self._shutdown()

    def _status(self) -> None:
        """Every STATUS_EVERY_S, one line: partitions held, turns and records since the last line.
        A stage that is alive but reads nothing tells itself apart from one that is stuck."""
        self._status_turns += 1
        now = time.monotonic()
        if now - self._status_at < STATUS_EVERY_S:
            return
        log.info("alive: %d partitions assigned, %d turns and %d records in %.0fs", len(self.assigned),
                 self._status_turns, self._status_records, now - self._status_at)
        self._status_at, self._status_records, self._status_turns = now, 0, 0

    def run_once(self) -> None:
        if time.monotonic() >= self._next_topic_check:
            self._next_topic_check = time.monotonic() + self.settings.topic_check_s
            self._check_topics()
        # A batch of about max_batch records, however many come bundled in one message: what has
        # arrived already, or else the first to come within the poll timeout and what came with
        # it. (consume() with a timeout waits out the timeout unless the batch fills, so each
        # stage held a job's records up to poll_timeout_s on their way.)
        wanted = max(1, int(self.settings.max_batch / self._per_message))
        # (Messages left from the last turn come first; the consumer is still asked, for its
        # liveness and what arrived behind them.)
        fresh = self.consumer.consume(max(1, wanted - len(self._carry)), 0)
        msgs, self._carry = self._carry + fresh, []
        if not msgs:
            first = self.consumer.poll(self.settings.poll_timeout_s)
            if first is not None:
                msgs = [first, *self.consumer.consume(wanted - 1, 0)] if wanted > 1 else [first]
        records, positions = self._decode(msgs) if msgs else ([], {})
        self._status_records = getattr(self, "_status_records", 0) + len(records)
        if records and not self._until_done(lambda: self._handle(records), "handling a batch"):
            return  # stopping before the batch was handled: none of it is committed
        self.offsets.next.update(positions)
        self._past_markers()
        self.stage_tick()
        if not self._until_done(self._flush_and_commit, "committing"):
            return
        self._check_membership()
        if time.monotonic() >= self._next_lag_export:
            self._next_lag_export = time.monotonic() + self.settings.metrics_period_s
            self._export_lag()

    def _past_markers(self) -> None:
        """A transaction's commit marker takes an offset of its own after its last record. The
        consumer's position moves past markers as it reads them; so does what is committed
        (every record before the position was handled, but in a partition with messages carried
        to the next turn), or each partition written in transactions would show a lag of 1 for
        ever, here and in kafka-consumer-groups."""
        if not self.assigned:
            return
        parts = [TopicPartition(self.catalogue[t].name, p) for t, p in self.assigned]
        try:
            read = self.consumer.position(parts)
        except KafkaException:
            return
        self.offsets.past_markers(read, {self._partition_of(m) for m in self._carry})

    def caught_up(self, topic: str, partitions: list[int], timeout: float = 1.0) -> bool:
        """True when every record written to these partitions so far (their high-water marks, asked
        of the broker now) has been handled here; False when behind, or the broker does not answer."""
        if not partitions:
            return True
        ends = self.ends(topic, partitions, timeout)
        if ends is None:  # the broker is away or slow: nothing can be said yet
            return False
        self._past_markers()
        return self.offsets.handled_to(topic, ends)

    def ends(self, topic: str, partitions: list[int], timeout: float = 0.5) -> dict[int, int] | None:
        """The high-water marks of these partitions of any topic, asked of the broker now; None
        when it does not answer them all within `timeout`."""
        return self.broker.ends(topic, partitions, timeout)

    def _check_topics(self) -> None:
        if self.broker.check_topics(self.consumer, first=not self._topics_checked):
            self._topics_checked = True

    def _export_lag(self) -> None:
        self._lag_labels = export_lag(self.consumer, self.catalogue, self.catalogue.group(self.stage.name),
                                      self.assigned, self.offsets.committed, self.offsets.next, self._read_times,
                                      self._lag_labels)

    def stage_tick(self) -> None:
        # What a tick emits is kept to leave in bundles, and sent even if the tick then fails (as
        # if each record had gone at once: a tick records what it sent before it sends it).
        self.emitter.holding = True
        try:
            self.stage.tick(time.monotonic())
        except Exception as exc:
            if is_transient(exc):
                log.warning("tick: %s (tried again next loop)", exc)
            else:  # a bug, not input: say so loudly, and keep serving
                log.exception("tick failed; the stage goes on")
        finally:
            self.emitter.holding = False
            self.emitter.send()

    def _handle(self, records: list[Record]) -> None:
        started = time.perf_counter()
        self.failed_records += handle_batch(self.stage, records, self.emitter)
        metrics.BATCH_SECONDS.labels(self.stage.name).observe(time.perf_counter() - started)
        metrics.BATCH_RECORDS.labels(self.stage.name).observe(len(records))
        by_topic = Counter(r.topic for r in records)
        for topic, n in by_topic.items():
            metrics.RECORDS.labels(self.stage.name, topic).inc(n)
        self.records += len(records)
        self.batches += 1

    def _until_done(self, step: Callable[[], object], what: str) -> bool:
        """Run step; while the broker or the store is unavailable, pause and try again (backing off
        up to retry_max_s) instead of exiting. False when asked to stop before it succeeded."""
        delay = self.settings.retry_min_s
        failed_at, attempts = None, 0
        while True:
            began = time.monotonic()
            try:
                step()
                if failed_at is not None:  # the operator reading the warnings sees the end of them
                    log.info("%s: done after %.1fs and %d attempts", what, time.monotonic() - failed_at, attempts + 1)
                return True
            except Exception as exc:
                failed_at, attempts = failed_at or began, attempts + 1
                if not is_transient(exc):
                    raise
                self.emitter.discard()
                self.retries += 1
                metrics.RETRIES.labels(self.stage.name).inc()
                log.warning("%s: %s; trying again in %.1fs", what, exc, delay)
            stop_at = time.monotonic() + delay
            while self._running and time.monotonic() < stop_at:
                time.sleep(min(0.1, delay))
            if not self._running:
                return False
            # Backing off keeps a step that fails at once from spinning; one that waited for the
            # broker (a flush, a producer's init) has spun nothing, and a longer sleep after it
            # only delays the first attempt once the broker is back.
            waited = time.monotonic() - began - delay
            delay = self.settings.retry_min_s if waited >= 1.0 else min(delay * 2, self.settings.retry_max_s)

    def _decode(self, msgs: list[Message]) -> tuple[list[Record], dict[tuple[str, int], int]]:
        """Decoded records, and the next offset per partition once they are handled."""
        records: list[Record] = []
        positions: dict[tuple[str, int], int] = {}
        by_name = self.catalogue.by_name
        weight = 0
        for n, m in enumerate(msgs):
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self._consume_errors += 1
                    if self._consume_errors in (1, 10, 100) or self._consume_errors % 1000 == 0:
                        log.warning("consume error (%d so far): %s", self._consume_errors, err)
                continue
            # A message the consumer read has its topic, partition and offset (the stub's Optionals
            # are for one made by hand).
            spec = by_name[m.topic()]  # type: ignore[index]
            partition: int = m.partition()  # type: ignore[assignment]
            offset: int = m.offset()  # type: ignore[assignment]
            tp = (spec.id, partition)
            try:
                decoded = decode_message(self.serde, spec, partition, offset, m.key(), m.value(), m.headers())
            except DecodeError as exc:
                decoded = []
                self.emitter.dead_letter(m, f"undecodable: {exc}", "undecodable")
            except WrongSchema as exc:
                decoded = []
                self.emitter.dead_letter(m, str(exc), "wrong_schema")
            if self._weigh is not None and decoded:
                weight += sum(self._weigh(r) for r in decoded)
                if weight > self.settings.max_turn_tasks and records:
                    # The turn is full: this message and those after it wait, in order, for the
                    # next; nothing of them is handled or committed now.
                    self._carry = [x for x in msgs[n:] if x.error() is None]
                    msgs = msgs[:n]
                    break
            if tp not in positions:  # the batch's first message of the partition: its age, for lag seconds
                self._read_times.setdefault(tp, deque(maxlen=64)).append((offset, m.timestamp()[1]))
            positions[tp] = offset + 1
            records.extend(decoded)
        if msgs:  # records per message, for the size of the next poll
            self._per_message = 0.7 * self._per_message + 0.3 * max(1.0, len(records) / len(msgs))
        return records, positions

    def _flush_and_commit(self) -> None:
        """Commit what was handled, never past a held record: in one transaction with the output
        (exactly once), or after the output is flushed (at least once). Raises what is worth
        trying again (the broker away, a transaction to send again)."""
        if self.transaction is not None:
            offsets = self._offsets()
            if self.transaction.commit(offsets, self.consumer.consumer_group_metadata):
                self._remember(offsets)
            return
        self.emitter.flush(self.settings.flush_timeout_s)
        self._commit()

    def _offsets(self) -> list[TopicPartition]:
        return self.offsets.to_commit(self.stage.held_offsets(), self.assigned)

    def _commit(self) -> None:
        """Commit offsets alone (at least once). A failed commit is not retried: the next loop
        commits newer positions, and whoever owns a partition next reads again from the last commit."""
        offsets = self._offsets()
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            # The group went on without us (a rebalance), or the coordinator is away: whoever owns
            # the partitions next reads again from the last commit. Retrying would only keep us
            # from rejoining.
            log.warning("commit not made (%s); the partitions' next owner reads again from the last commit",
                        err.name() if isinstance(err, KafkaError) else exc)
            return
        self._remember(offsets)

    def _remember(self, stored: list[TopicPartition]) -> None:
        self.offsets.remember(stored)

    def _shutdown(self) -> None:
        try:
            self._flush_and_commit()
        except Exception:  # still leave the group cleanly; uncommitted work is redelivered
            log.exception("final commit failed")
        self.consumer.close()  # leaves the group so partitions move at once
        self.stage.close()
        if self.transaction is not None:
            self.transaction.close()
        elif self.producer is not None:  # without a transaction there is always one
            self.producer.flush(10)
        if self.registry is not None:
            self.registry.close()


def stage_consumer(settings: Settings, catalogue: Catalogue, stage: Stage, instance_id: str) -> Consumer:
    """A consumer of the stage's group, for its instance."""
    return Consumer(
        {
            **kafka_access(settings),
            "group.id": catalogue.group(stage.name),
            "client.id": instance_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": settings.session_timeout_ms,
            "heartbeat.interval.ms": max(100, settings.session_timeout_ms // 6),
            "partition.assignment.strategy": stage.assignment,
            # How long the broker holds a fetch that finds nothing: every idle consumer asks
            # again this often. Data that arrives ends the wait early.
            "fetch.wait.max.ms": FETCH_WAIT_MS,
            # Only what committed: the output of an aborted or still open transaction is
            # never handled (librdkafka's default, said here because it is the guarantee).
            "isolation.level": "read_committed",
            "socket.nagle.disable": True,
            "allow.auto.create.topics": False,  # see producer_config
            **CONSUMER_RECOVERY,
            **debug_config(settings),
        }
    )


def stage_output(settings: Settings, group: str, instance_id: str) -> tuple[BatchTransaction | None, Producer | None]:
    """What the instance produces through: a transaction (exactly_once) or a producer alone."""
    if not settings.exactly_once:
        return None, Producer(producer_config(settings))
    # One id per instance: a restarted instance fences its predecessor and aborts what it left
    # open. Zombies of a rebalance are fenced by the group (KIP-447).
    txn_id = f"{group}.{instance_id}"
    return BatchTransaction(lambda on_error: Producer({**producer_config(settings, txn_id), "error_cb": on_error}),
                            settings.transaction_timeout_s), None
