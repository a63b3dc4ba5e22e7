"""The loop every stage instance runs: poll a batch, decode it, let the stage handle it, flush
what it produced and commit the offsets (never past a record the stage holds), with the
rebalance callbacks, the broker checks and the lag it exports around it."""

from __future__ import annotations

import logging
import signal
import time
import uuid
from collections import Counter, deque
from typing import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from peloton import metrics
from peloton.config import Settings
from peloton.runtime.clients import (
    CONSUMER_RECOVERY,
    FETCH_WAIT_MS,
    RECOVERY,
    debug_config,
    kafka_access,
    producer_config,
)
from peloton.runtime.emitter import Emitter
from peloton.runtime.errors import is_transient
from peloton.runtime.record import Record, WrongSchema, decode_message
from peloton.runtime.membership import group_members
from peloton.runtime.stage import Stage, handle_batch
from peloton.runtime.stuck import StuckWatch
from peloton.runtime.transaction import BatchTransaction
from peloton.serde import DecodeError, registry
from peloton.topics import Catalogue

log = logging.getLogger("peloton.runtime")


# How often the loop says it is alive, with what it has and what it did since (INFO).
STATUS_EVERY_S = 30.0
# An instance that has held no partition this long asks the broker whether it is in its group at
# all, and joins again with a new consumer if it is not: librdkafka can stay out of its group
# after its session ended while every broker was down (seen three times: place, launch or admit
# without partitions minutes after the cluster was back, the group going on without it).
REJOIN_AFTER_S = 30.0


class StageRuntime:
    def __init__(self, stage: Stage, settings: Settings, instance_id: str | None = None):
        self.stage = stage
        self.settings = settings
        self.catalogue = Catalogue(settings.topic_prefix)
        self.serde = registry()
        self.instance_id = instance_id or f"{stage.name}-{uuid.uuid4().hex[:8]}"
        self._running = True
        self.consumer = self._new_consumer()
        self.transaction: BatchTransaction | None = None
        if settings.exactly_once:
            # One id per instance: a restarted instance fences its predecessor and aborts what
            # it left open. Zombies of a rebalance are fenced by the group (KIP-447).
            txn_id = f"{self.catalogue.group(stage.name)}.{self.instance_id}"
            self.transaction = BatchTransaction(
                lambda on_error: Producer({**producer_config(settings, txn_id), "error_cb": on_error}),
                settings.transaction_timeout_s)
            self.producer = None  # the transaction's own, replaced after a failed attempt
        else:
            self.producer = Producer(producer_config(settings))
        self.emitter = Emitter(self.producer, self.catalogue, self.serde, stage.name, settings.max_message_bytes,
                               self.transaction)
        stage.bind(self.emitter, settings, self.catalogue)
        stage.caught_up = self.caught_up
        stage.ends = self.ends
        self._next: dict[tuple[str, int], int] = {}  # next offset to commit, per (topic id, partition)
        # What the last commit stored per partition: (offset, how far read) -- they differ where a
        # record is held, and the commit's metadata carries the second for lag tools.
        self._committed: dict[tuple[str, int], tuple[int, int]] = {}
        # (offset, produce time ms) of recent messages read per partition, for lag in seconds
        self._read_times: dict[tuple[str, int], deque] = {}
        self._lag_labels: set[tuple[str, str, str]] = set()
        self._next_lag_export = 0.0
        self.metrics_address = metrics.serve(settings)
        self.assigned: set[tuple[str, int]] = set()
        self.batches = 0
        self.records = 0
        self.failed_records = 0  # handled alone, raised, dead-lettered
        self.retries = 0  # pauses for an unavailable broker or store
        self.recoveries = 0  # times the broker was found to have lost everything
        # Offsets this instance committed, kept across rebalances: if the group's committed
        # offsets are all gone at the next assignment, the log was lost (see _on_assign).
        self._ever_committed: dict[tuple[str, int], int] = {}
        self._next_topic_check = 0.0
        self._topics_checked = False
        self._admin = None
        self._consume_errors = 0
        self._per_message = 1.0  # records per message read lately (bundles hold many)
        # Messages read but left for the next turn, in the order read: a turn ends where its
        # records' weight passes max_turn_tasks (Stage.weight; only stages that weigh theirs).
        self._carry: list = []
        self._weigh = stage.weight if type(stage).weight is not Stage.weight else None
        self._unassigned_since: float | None = None
        self._next_membership_check = 0.0
        self.rejoins = 0  # times a new consumer joined because the old one was out of its group
        self.registry = self._register()

    def _new_consumer(self) -> Consumer:
        settings, stage = self.settings, self.stage
        return Consumer(
            {
                **kafka_access(settings),
                "group.id": self.catalogue.group(stage.name),
                "client.id": self.instance_id,
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

    def _register(self):
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

    def _partition_of(self, msg) -> tuple[str, int]:
        """A message's (topic id, partition)."""
        return self.catalogue.by_name[msg.topic()].id, msg.partition()

    def _on_assign(self, consumer, partitions) -> None:
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
        """True when the group has no committed offset left for any partition this instance once
        committed to. Apache Kafka keeps offsets with its log; they all go at once only when the
        cluster was wiped, or an operator deleted the topics (which deletes their offsets)."""
        if not self._ever_committed:
            return False
        try:
            parts = [TopicPartition(self.catalogue[t].name, p) for t, p in self._ever_committed]
            if any(tp.offset >= 0 for tp in self.consumer.committed(parts, timeout=10)):
                return False
        except KafkaException as exc:
            log.warning("could not read committed offsets: %s", exc)
            return False
        self._ever_committed.clear()
        self._committed.clear()
        return True

    def _on_revoke(self, consumer, partitions) -> None:
        ids = self._ids(partitions)
        # Everything handled so far is flushed and committed at the end of each loop, so the next
        # owner starts exactly after it; only held messages are read again.
        try:
            self._flush_and_commit()
        except Exception as exc:  # the next owner redoes what was not committed
            log.warning("commit before giving up partitions failed: %s", exc)
        self._forget(ids, "revoked")

    def _on_lost(self, consumer, partitions) -> None:
        # The group already gave these away (this member missed its session timeout): a commit
        # would be refused, so drop them; the next owner reads again from the last commit.
        self._forget(self._ids(partitions), "lost")

    def _forget(self, ids: list[tuple[str, int]], how: str) -> None:
        self.assigned.difference_update(ids)
        gone = set(ids)  # their next owner reads them from the last commit, carried ones too
        self._carry = [m for m in self._carry if self._partition_of(m) not in gone]
        for tp in ids:
            self._next.pop(tp, None)
            self._committed.pop(tp, None)
            self._read_times.pop(tp, None)
        log.info("%s %s %s", self.instance_id, how, ids)
        self._registry_partitions()
        self.stage.on_revoke(ids)

    # -- membership -------------------------------------------------------------------------
    def _check_membership(self) -> None:
        """After REJOIN_AFTER_S without partitions, and then as often, ask whether the broker
        counts this instance in its group; a member with nothing to do (more instances than
        partitions) stays as it is."""
        now = time.monotonic()
        if self.assigned:
            self._unassigned_since = None
            return
        if self._unassigned_since is None:
            self._unassigned_since = now
        if now - self._unassigned_since < REJOIN_AFTER_S or now < self._next_membership_check:
            return
        self._next_membership_check = now + REJOIN_AFTER_S
        if self._is_member() is False:
            self._rejoin(now - self._unassigned_since)

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
        self._unassigned_since = time.monotonic()
        self.rejoins += 1

    # -- main loop ------------------------------------------------------------------------
    def stop(self, *_args) -> None:
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
        self._next.update(positions)
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
        # (Not where messages read are carried to the next turn: the position is past them.)
        carried = {self._partition_of(m) for m in self._carry}
        for tp in read:
            key = (self.catalogue.by_name[tp.topic].id, tp.partition)
            if tp.offset >= 0 and tp.offset > self._next.get(key, -1) and key not in carried:
                self._next[key] = tp.offset

    def caught_up(self, topic: str, partitions: list[int], timeout: float = 1.0) -> bool:
        """True when every record written to these partitions so far (their high-water marks, asked
        of the broker now) has been handled here; False when behind, or the broker does not answer."""
        if not partitions:
            return True
        ends = self.ends(topic, partitions, timeout)
        if ends is None:  # the broker is away or slow: nothing can be said yet
            return False
        self._past_markers()
        return all(self._next.get((topic, p), 0) >= end for p, end in ends.items())

    def ends(self, topic: str, partitions: list[int], timeout: float = 0.5) -> dict[int, int] | None:
        """The high-water marks of these partitions of any topic, asked of the broker now; None
        when it does not answer them all within `timeout`."""
        from peloton.runtime.readback import offsets_at

        name = self.catalogue[topic].name
        ends = offsets_at(self._admin_client(), [(name, p) for p in partitions], OffsetSpec.latest(), timeout)
        return {p: end for (_, p), end in ends.items()} if len(ends) == len(partitions) else None

    def _admin_client(self):
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({**kafka_access(self.settings), **RECOVERY})
        return self._admin

    def _check_topics(self) -> None:
        """At start, check every topic against topics.yaml and say what differs; later, make
        again any topic that is gone (an operator deleted it, or the cluster was wiped):
        consumers would wait for it for ever, and produced messages would fail."""
        from peloton.topics import apply_topics

        first = not self._topics_checked
        if not first:
            try:
                present = self.consumer.list_topics(timeout=2).topics
            except KafkaException:
                return  # the broker is away; the loop waits for it
            missing = [t.name for t in self.catalogue if t.name not in present]
            if not missing:
                return
            log.warning("topics missing on the broker (deleted, or the cluster was wiped?): %s; making them "
                        "from topics.yaml", ", ".join(missing))
        try:
            report = apply_topics(self._admin_client(), self.catalogue, fix=False)
        except Exception as exc:  # the broker is away, or another instance is making them too
            log.warning("could not check the topics: %s", exc)
            return
        self._topics_checked = True
        for row in report:
            if row["status"] not in ("ok", "created"):
                log.warning("topic %s %s (topics.yaml; `pelotonctl topics apply` sets it)", row["topic"], row["status"])

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

    def _export_lag(self) -> None:
        """kafka_consumergroup_lag and _seconds for the partitions this instance owns: the log end
        from the last fetch (its high-water mark, as ListOffsets would say without a round trip),
        the committed offset, and the produce time of the first message read at or before it."""
        group = self.catalogue.group(self.stage.name)
        now_s = time.time()
        shown = set()
        for tp in self.assigned:
            name = self.catalogue[tp[0]].name
            try:
                _low, end = self.consumer.get_watermark_offsets(TopicPartition(name, tp[1]), cached=True)
            except KafkaException:
                continue
            # Before this instance's first commit on a partition, what it handled stands in for it;
            # a partition with nothing in it has no lag whoever committed what.
            committed = self._committed[tp][0] if tp in self._committed else self._next.get(tp, 0 if end == 0 else None)
            if end < 0 or committed is None:
                continue
            lag = max(0, end - committed)
            seen = [ts for off, ts in self._read_times.get(tp, ()) if off <= committed and ts > 0]
            age = max(0.0, now_s - seen[-1] / 1000) if lag and seen else 0.0
            labels = (group, name, str(tp[1]))
            metrics.LAG.labels(*labels).set(lag)
            metrics.LAG_SECONDS.labels(*labels).set(round(age, 3))
            metrics.HELD.labels(*labels).set(max(0, min(self._next.get(tp, committed), end) - committed))
            shown.add(labels)
        for labels in self._lag_labels - shown:  # partitions given away: their owner reports them now
            for gauge in (metrics.LAG, metrics.LAG_SECONDS, metrics.HELD):
                try:
                    gauge.remove(*labels)
                except KeyError:
                    pass
        self._lag_labels = shown

    def _until_done(self, step, what: str) -> bool:
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

    def _decode(self, msgs) -> tuple[list[Record], dict[tuple[str, int], int]]:
        """Decoded records, and the next offset per partition once they are handled."""
        records = []
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
            spec = by_name[m.topic()]
            tp = (spec.id, m.partition())
            try:
                decoded = decode_message(self.serde, spec, m.partition(), m.offset(), m.key(), m.value(), m.headers())
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
                self._read_times.setdefault(tp, deque(maxlen=64)).append((m.offset(), m.timestamp()[1]))
            positions[tp] = m.offset() + 1
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
        """The offsets to commit: what was handled, held records excepted. Where a stage holds a
        record back, the commit's metadata says how far it has read (`read=N`), so lag tools can
        tell held records (read, waiting for room or a host) from a backlog."""
        held = self.stage.held_offsets()
        offsets = []
        for tp, nxt in self._next.items():
            target = min(nxt, held[tp]) if tp in held else nxt
            if self._committed.get(tp) != (target, nxt) and tp in self.assigned:
                metadata = f"read={nxt}" if target < nxt else ""
                offsets.append(TopicPartition(self.catalogue[tp[0]].name, tp[1], target, metadata=metadata))
        return offsets

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
        """What a commit stored, per (topic id, partition), and in `ever` what a wiped log would
        have forgotten (_offsets_wiped)."""
        for tp in stored:
            key = (self.catalogue.by_name[tp.topic].id, tp.partition)
            read = int(tp.metadata[5:]) if tp.metadata and tp.metadata.startswith("read=") else tp.offset
            self._committed[key] = (tp.offset, read)
            if read > 0:
                self._ever_committed[key] = tp.offset

    def _shutdown(self) -> None:
        try:
            self._flush_and_commit()
        except Exception:  # still leave the group cleanly; uncommitted work is redelivered
            log.exception("final commit failed")
        self.consumer.close()  # leaves the group so partitions move at once
        self.stage.close()
        if self.transaction is not None:
            self.transaction.close()
        else:
            self.producer.flush(10)
        if self.registry is not None:
            self.registry.close()
