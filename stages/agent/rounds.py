"""The agent's report rounds in flight, as plain bookkeeping: no Kafka, each call given `now`
(a time.monotonic() reading).

A round is one heartbeat's reports (one per host with news), with the updates they carry. It is
finished once the broker answered every report: acknowledged, it renews the lease and its ended
runs are forgotten; failed, its updates go again with a later round. A Kafka client that neither
delivers nor fails a round well past its message timeout, or whose every round fails for as long,
is replaced, and the updates of every round still in flight go again through its successor.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from peloton.host.driver import TaskUpdate


@dataclass(slots=True)
class Round:
    """One heartbeat's reports, until the broker has acknowledged every one."""

    sent: float  # time.monotonic() when they were produced
    waiting: int  # reports not acknowledged yet
    updates: list[TaskUpdate]
    failed: bool = False


@dataclass(frozen=True, slots=True)
class Finished:
    """A round every report of which was answered."""

    sent: float
    updates: list[TaskUpdate]
    failed: bool  # any of its reports failed: its updates go again
    first: bool  # the first round the broker ever acknowledged (how long a start took to be heard)


class Rounds:
    def __init__(self, now: float) -> None:
        self.open: dict[int, Round] = {}  # round id -> its round, in the order they were sent
        self._ids = itertools.count()
        # When a report last got through (or the producer was made), and the rounds that failed
        # since: a producer whose every report fails, round after round, is replaced too.
        self.delivered_at = now
        self.acked_at: float | None = None  # when a round last got through (a new producer's start is not)
        self.failed = 0
        self.ever_delivered = False

    def __len__(self) -> int:
        return len(self.open)

    def start(self, updates: list[TaskUpdate], now: float) -> tuple[int, Round]:
        """A new round carrying these updates, before its reports are produced."""
        round_id = next(self._ids)
        self.open[round_id] = sending = Round(now, 0, updates)
        return round_id, sending

    def handed(self, round_id: int) -> None:
        """One more of its reports is with the client, waiting for its answer."""
        self.open[round_id].waiting += 1

    def produced(self, round_id: int, failed: bool) -> list[TaskUpdate]:
        """Its reports were handed to the client (`failed`: the client took not every one). A
        round of which none went is over at once, counted failed when the client refused it: its
        updates are returned, to go again. Else nothing is."""
        sending = self.open[round_id]
        sending.failed = sending.failed or failed
        if sending.waiting:
            return []
        del self.open[round_id]
        self.failed += sending.failed
        return sending.updates

    def answered(self, round_id: int, err: object, now: float) -> Finished | None:
        """A report's acknowledgement (err None) or failure: the round, once every report of it
        is answered. None while some wait, or for a round no longer kept (taken back)."""
        sending = self.open.get(round_id)
        if sending is None:
            return None
        sending.waiting -= 1
        sending.failed = sending.failed or err is not None
        if sending.waiting > 0:
            return None
        del self.open[round_id]
        if sending.failed:
            self.failed += 1
            return Finished(sending.sent, sending.updates, True, False)
        first = not self.ever_delivered
        self.delivered_at, self.failed, self.ever_delivered = now, 0, True
        self.acked_at = now
        return Finished(sending.sent, sending.updates, False, first)

    def oldest_wait(self, now: float) -> float | None:
        """How long the oldest round in flight has waited for its answers; None when none waits."""
        if not self.open:
            return None
        return now - next(iter(self.open.values())).sent

    def stuck(self, now: float, limit: float) -> Literal["unanswered", "failing"] | None:
        """Whether the client will not deliver: it has neither delivered nor failed a round for
        `limit`, or every round failed since one last got through, for as long."""
        waited = self.oldest_wait(now)
        if waited is not None and waited >= limit:
            return "unanswered"
        if self.failed and now - self.delivered_at >= limit:
            return "failing"
        return None

    def take_back(self, now: float) -> list[TaskUpdate]:
        """Every round's updates, in the order they were sent, for a new producer to send again;
        an answer the old one gives after all finds no round. The new one's own time begins."""
        held = [u for sending in self.open.values() for u in sending.updates]
        self.open.clear()
        self.delivered_at, self.failed = now, 0
        return held
