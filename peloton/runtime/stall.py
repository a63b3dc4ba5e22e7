"""A reader of assigned partitions that stopped reading, told apart from one with nothing to read.

A stage's consumer is a group member: when its fetches stop after the brokers restart, its
session ends and it rejoins with a new consumer state (StageRuntime._rejoin). A reader that
assign()s its partitions (a host agent's commands, a view of a compacted topic) has no such step,
and librdkafka's assigned consumers have been seen to fetch nothing after every broker restarted
while committed records waited (librdkafka #5153): in CI an agent read no command for the three
minutes after the three-broker cluster's restart, its host manager gave up its launches every
20 s and launched them again, and the job never ran. The same client made afresh reads at once.

The check (ReadStall.stalled) takes, every few seconds, each partition's end as the reader sees
it (for read_committed readers the last stable offset: records of open transactions do not
count) and the reader's position. A partition is stalled when an end taken `after_s` ago is still
ahead of the position now: a working reader fetches committed records within its fetch wait.

The ends are asked on an admin client of the watch's own (EndsAside), not on the reader: a
request on the reader's connection waits behind its held fetch (librdkafka: "held back by
preceding blocking FetchRequest"), and on a stuck reader's it may never be answered: the check
then skips itself for as long as the reader stays stuck. An agent of the three-broker test read
no command for three minutes after the whole cluster's restart (2026-11-28), and its watch,
then asking on the reader, said nothing.

The watch's admin client is a librdkafka client too, and can be stuck the same way: unanswered
past ADMIN_UNANSWERED_S, it is replaced (EndsAside). A broker that is truly away costs a new
admin client every ADMIN_UNANSWERED_S; a stuck one kept the watch quiet for good (an agent on
Kafka 4.2.2 read no command for 180 s after the whole cluster's restart, its watch silent).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_END, IsolationLevel, KafkaException, TopicPartition

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

# (topic, partitions, timeout_s) -> {partition: end}, or None when the broker did not answer them all
Ends = Callable[[str, list[int], float], dict[int, int] | None]

log = logging.getLogger("peloton.stall")

CHECK_EVERY_S = 5.0
# Past the transaction timeout (10 s) and a broker's failover: a record read that late is slow,
# not stalled; a client that fetches nothing for this long after the brokers came back is.
STALLED_AFTER_S = 20.0
# The caller's loop waits for the answer: a broker that takes longer is taken for away (a leader
# that died answers nothing until the election), and the check is skipped.
ASK_TIMEOUT_S = 0.5
# The ends at a reader's start (ReaderWatch.begin): the admin client's first request also finds
# the brokers, and nothing else waits on the loop yet.
BEGIN_ASK_TIMEOUT_S = 2.0
# Every question unanswered for this long: the admin client itself is taken for stuck and made
# afresh. As long as a reader is judged stalled after: no election or restart takes this long.
ADMIN_UNANSWERED_S = STALLED_AFTER_S


class ReadStall:
    """The pure rule: ends and positions in, stalled partitions out (no Kafka here)."""

    def __init__(self, after_s: float = STALLED_AFTER_S):
        self.after_s = after_s
        self._ends: dict[int, deque[tuple[float, int]]] = {}  # partition -> (when, end) seen, oldest first
        self._first: dict[int, int] = {}  # partition -> the first end seen: where a reader with no position is

    def stalled(self, now: float, ends: dict[int, int], positions: dict[int, int | None]) -> list[int]:
        """Partitions whose end seen `after_s` ago or earlier is still ahead of their position.
        A position of None (nothing read since the reader was assigned) stands at the first end
        seen: a reader that started at the end is stalled once records came after it."""
        out = []
        for partition, end in ends.items():
            seen = self._ends.setdefault(partition, deque())
            self._first.setdefault(partition, end)
            seen.append((now, end))
            # Only the newest end old enough to judge by is needed, and those after it.
            while len(seen) > 1 and now - seen[1][0] >= self.after_s:
                seen.popleft()
            when, old_end = seen[0]
            position = positions.get(partition)
            at = self._first[partition] if position is None or position < 0 else position
            if now - when >= self.after_s and at < old_end:
                out.append(partition)
        return out

    def begin(self, now: float, ends: dict[int, int]) -> None:
        """The ends when the reader was assigned at the end: it stands there until it fetches, and
        records that came before the first check count against it as any later ones."""
        for partition, end in ends.items():
            self._first[partition] = end
            self._ends.setdefault(partition, deque()).append((now, end))

    def restart_at(self, positions: dict[int, int | None]) -> dict[int, int]:
        """Where a new reader goes on from: each partition's position, else the first end seen."""
        return {p: (pos if pos is not None and pos >= 0 else self._first[p])
                for p, pos in positions.items() if (pos is not None and pos >= 0) or p in self._first}

    def forget(self, assigned: dict[int, int] | None = None) -> None:
        """A new reader: what the old one was judged by no longer holds. It stands where it was
        `assigned` until it fetches: its owner's report of where it is says so meanwhile (an
        agent that never handled a command there had nothing else to say), and it is judged
        from there, not from the first end seen after it came."""
        self._ends.clear()
        self._first.clear()
        self._first.update(assigned or {})


class EndsAside:
    """Partitions' last stable offsets (the ends a read_committed reader reads to), asked on an
    admin client of its own: one ListOffsets request per leader for all of them, on connections
    no reader's fetch holds. The client is made at the first question, and made again when no
    question was answered for `unanswered_s` (a stuck client says nothing, as a stuck reader
    reads nothing)."""

    def __init__(self, config: dict, unanswered_s: float = ADMIN_UNANSWERED_S,
                 clock: Callable[[], float] = time.monotonic, make_admin: Callable[[], AdminClient] | None = None):
        self.config = {**config, "log_level": 2}  # the reader beside it already says what the brokers do
        self.unanswered_s = unanswered_s
        self.clock = clock
        self._make_admin = make_admin or self._admin_client
        self._admin: AdminClient | None = None
        self._answered = clock()  # when a question was last answered (or the client made)
        self.renewals = 0

    def _admin_client(self) -> AdminClient:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.config)

    def __call__(self, topic: str, partitions: list[int], timeout_s: float) -> dict[int, int] | None:
        """{partition: end}, or None when some partition's leader did not answer in timeout_s."""
        from confluent_kafka.admin import OffsetSpec

        from peloton.runtime.readback import offsets_at

        if not partitions:
            return {}  # nothing to ask, and no client made for it
        if self._admin is None:
            self._admin = self._make_admin()
            self._answered = self.clock()
        ends = offsets_at(self._admin, [(topic, p) for p in partitions], OffsetSpec.latest(), timeout_s,
                          IsolationLevel.READ_COMMITTED)
        if len(ends) == len(partitions):
            self._answered = self.clock()
            return {p: end for (_, p), end in ends.items()}
        if self.clock() - self._answered >= self.unanswered_s:
            self._renew()
        return None

    def _renew(self) -> None:
        log.warning("the read watch's admin client answered nothing for %.0f s (the brokers away, or the client "
                    "stuck): a new one asks from now on", self.clock() - self._answered)
        # Dropping the last reference destroys the client, which waits for its threads: not on
        # the caller's loop. The list holds the only reference, and the thread empties it.
        stuck, self._admin = [self._admin], None  # the next question makes the new one
        threading.Thread(target=stuck.clear, name="stuck-admin-abandoned", daemon=True).start()
        self.renewals += 1


class ReaderWatch:
    """ReadStall over a live consumer: at most every CHECK_EVERY_S it asks the broker for the
    partitions' ends (`ends`, an EndsAside) and reads the consumer's positions. A broker that
    does not answer skips the check: a reader cannot read from a broker that is away, and is not
    judged for it."""

    def __init__(self, topic: str, partitions: list[int], ends: Ends, after_s: float = STALLED_AFTER_S,
                 every_s: float = CHECK_EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.topic = topic
        self.partitions = list(partitions)
        self.ends = ends
        self.rule = ReadStall(after_s)
        self.every_s = every_s
        self.clock = clock
        self._next = clock() + every_s
        self.renewals = 0

    def stalled(self, consumer: Consumer, known: dict[int, int | None] | None = None) -> list[int]:
        """`known`: where the reader is by its owner's count, for a partition it has no position
        of yet (assigned at a saved offset, nothing fetched)."""
        now = self.clock()
        if now < self._next:
            return []
        self._next = now + self.every_s
        ends = self.ends(self.topic, self.partitions, ASK_TIMEOUT_S)
        if ends is None:
            return []  # the broker is away: nothing to judge by
        return self.rule.stalled(now, ends, self.positions(consumer, known))

    def begin(self, partitions: list[int]) -> None:
        """Ask the ends of partitions the reader was just assigned at the end (the rule's `begin`);
        a broker that does not answer in time leaves them to the first check, as before."""
        if not partitions:
            return
        ends = self.ends(self.topic, partitions, BEGIN_ASK_TIMEOUT_S)
        if ends is not None:
            self.rule.begin(self.clock(), ends)

    def positions(self, consumer: Consumer, known: dict[int, int | None] | None = None) -> dict[int, int | None]:
        try:
            found = {tp.partition: (tp.offset if tp.offset >= 0 else None)
                     for tp in consumer.position([TopicPartition(self.topic, p) for p in self.partitions])}
        except KafkaException:
            found = {p: None for p in self.partitions}
        return {p: pos if pos is not None else (known or {}).get(p) for p, pos in found.items()}

    def standing(self, consumer: Consumer, known: dict[int, int | None] | None = None) -> dict[int, int]:
        """Where the reader stands in each partition it can say: its position, else `known`, else
        the first end seen (every record before it read)."""
        return self.rule.restart_at(self.positions(consumer, known))

    def renew(self, consumer: Consumer, make_consumer: Callable[[], Consumer],
              known: dict[int, int | None] | None = None,
              otherwise: int = OFFSET_END) -> tuple[Consumer, dict[int, int]]:
        """Replace a stalled consumer: a new one (make_consumer()) assigned where the old one stood
        (`standing`, else `otherwise`); the old one is closed on a thread of its own. Returns the
        new consumer and the offsets it starts at."""
        at = self.standing(consumer, known)
        new = make_consumer()
        threading.Thread(target=abandon_consumer, args=(consumer,), name="stalled-reader-abandoned",
                         daemon=True).start()
        new.assign([TopicPartition(self.topic, p, at.get(p, otherwise)) for p in self.partitions])
        self.renewed(at)
        return new, at

    def renewed(self, assigned: dict[int, int] | None = None) -> None:
        self.rule.forget(assigned)
        self.renewals += 1
        self._next = self.clock() + self.every_s


def abandon_consumer(consumer: Consumer) -> None:
    """Closes a consumer that stopped fetching, away from the caller's loop (closing a stuck
    client may wait on its broker threads); meant as a daemon thread's target."""
    with contextlib.suppress(Exception):  # it is being thrown away: nothing it says matters
        consumer.close()
