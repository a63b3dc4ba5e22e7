"""A chore a stage does in its tick a bounded amount at a time: forgetting old rows, deleting
jobs past their retention."""

from __future__ import annotations


class Sweep:
    """Due every `every` seconds of the tick's clock, the first tick included, and at the next
    tick again while the last round did a whole `batch`: a backlog (a busy hour's ended runs, a
    store from before the sweep existed) goes a batch a tick, and the loop polls between them."""

    def __init__(self, every: float, batch: int):
        self.every = every
        self.batch = batch
        self._next = float("-inf")

    def due(self, now: float) -> bool:
        return now >= self._next

    def done(self, now: float, count: int) -> int:
        """A round at `now` did `count` (rows forgotten, jobs deleted); returns it."""
        self._next = now if count >= self.batch else now + self.every
        return count
