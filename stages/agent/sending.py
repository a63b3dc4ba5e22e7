"""An agent's reports on their way to the broker: each round handed to the Kafka client, its
answers counted in Rounds (stages/agent/rounds.py), and a client that will not deliver replaced."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

from peloton import metrics
from peloton.auth.host_keys import HEADER as HOST_SIGNATURE
from peloton.auth.host_keys import signature
from peloton.host.driver import TaskUpdate
from peloton.runtime.errors import error_text
from peloton.runtime.loop import STATUS_EVERY_S
from stages.agent.rounds import Rounds

if TYPE_CHECKING:
    from confluent_kafka import Producer

log = logging.getLogger("peloton.agent")

# How long past its message timeout a report may wait for the Kafka client's answer (delivered or
# failed) before the client is taken for stuck (ReportSender.check).
REPORT_ANSWER_GRACE_S = 10.0


class ReportSender:
    """`new_producer` makes a client whose reports time out after `timeout_s`; `delivered` takes
    each report's answer (its round id, and the error or None)."""

    def __init__(self, topic: str, partitions: dict[str, int], keys: dict[str, str], timeout_s: float,
                 rounds: Rounds, new_producer: Callable[[], Producer],
                 delivered: Callable[[int, object], None]) -> None:
        self.topic = topic
        self.partitions = partitions  # host id -> its shard's partition
        self.keys = keys  # host id -> the key its reports are signed with
        self.timeout_s = timeout_s
        self.rounds = rounds
        self.new_producer = new_producer
        self.delivered = delivered
        self.producer = new_producer()
        self.renewals = 0
        self._refused_said_at = float("-inf")

    def send(self, updates: list[TaskUpdate], reports: Iterable[tuple[str, bytes]]) -> list[TaskUpdate]:
        """One round: these updates, with these reports (host id, encoded AgentReport), made as
        they go. The updates to send again when none of its reports went; the rest wait for the
        client's answers."""
        round_id, _ = self.rounds.start(updates, time.monotonic())
        failed = False
        for host_id, value in reports:
            if not self._produce(round_id, host_id, value):
                failed = True  # this round's other reports would fare no better
                break
        return self.rounds.produced(round_id, failed)

    def _produce(self, round_id: int, host_id: str, value: bytes) -> bool:
        """Hands one report to the Kafka client, signed with its host's key; False when it took it
        not: its queue is full (the broker is away), or it refuses the report at once (the broker
        denies this agent's user the topic: an ACL taken away). The agent's step goes on (its lease
        still runs out, its runs are still watched); the round's updates go again with a later one."""
        key = self.keys.get(host_id)
        signed: dict[str, Any] = {"headers": [(HOST_SIGNATURE, signature(key, value))]} if key else {}
        try:
            self.producer.produce(self.topic, key=host_id.encode(), value=value, partition=self.partitions[host_id],
                                  **signed, on_delivery=self._answer(round_id))
        except (BufferError, KafkaException) as exc:
            if isinstance(exc, KafkaException):
                self._refused(exc)
            return False
        self.rounds.handed(round_id)
        metrics.AGENT_REPORTS.inc()
        return True

    def _answer(self, round_id: int) -> Callable[[object, object], None]:
        """What the client calls with a report's answer."""
        return lambda err, _msg: self.delivered(round_id, err)

    def _refused(self, exc: KafkaException) -> None:
        """Says why reports cannot go, at most every STATUS_EVERY_S."""
        now = time.monotonic()
        if now - self._refused_said_at >= STATUS_EVERY_S:
            self._refused_said_at = now
            log.warning("the Kafka client refuses this agent's reports to %s: %s; they go again, and the lease runs "
                        "out if none gets through", self.topic, error_text(exc))

    def check(self) -> list[TaskUpdate]:
        """A Kafka client that will not deliver is replaced: a new producer takes over, and the
        updates of every round still waiting are returned, to go again with the next report. It
        will not deliver when it has neither delivered nor failed a report well past its message
        timeout (an idempotent producer that lost its broker-side state, after a whole-cluster
        restart, can hold every round with no callback and no client error), or when every report
        has failed since one last got through, for as long (each round times out and goes again,
        so none stays unanswered long). Either way no report gets through, the agent stays fenced,
        and the host manager refuses every placement on its hosts as unknown."""
        now = time.monotonic()
        stuck = self.rounds.stuck(now, self.timeout_s + REPORT_ANSWER_GRACE_S)
        if stuck == "unanswered":
            log.warning("the Kafka client neither delivered nor failed reports sent %.0fs ago (their timeout "
                        "is %gs; %d report rounds and %d messages held): a new producer takes over, and their "
                        "updates go again", self.rounds.oldest_wait(now), self.timeout_s, len(self.rounds),
                        len(self.producer))
        elif stuck == "failing":
            log.warning("no report got through for %.0fs, and %d report rounds failed (their timeout is %gs): a new "
                        "producer takes over", now - self.rounds.delivered_at, self.rounds.failed, self.timeout_s)
        return [] if stuck is None else self._renew()

    def _renew(self) -> list[TaskUpdate]:
        old, self.producer = self.producer, self.new_producer()
        self.renewals += 1
        metrics.AGENT_PRODUCER_RENEWALS.inc()
        held = self.rounds.take_back(time.monotonic())
        # Away from the loop: purging and freeing a client may wait on its broker threads.
        threading.Thread(target=_abandon, args=(old,), name="report-producer-abandoned", daemon=True).start()
        return held


def _abandon(producer: Producer) -> None:
    """Lets go of a producer that stopped answering: its queue is purged (the updates it held go
    again through its successor) and the client is freed when this thread ends."""
    try:
        producer.purge()
        producer.flush(0)
    except Exception:  # it is being thrown away: nothing it says matters
        pass
