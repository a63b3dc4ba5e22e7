"""What the operators' routes (routes/operations.py) keep across requests: one lag monitor per
API instance, and the limits of what they may sample and replay."""

from __future__ import annotations

import threading

from fastapi import Request

from peloton.config import Settings
from pelotonctl.lag_child import LagInChild

# How many samples the API keeps per partition: a caller's --window is at most this.
LAG_WINDOW = 60
# The topics a replay through the API may write: the API writes job commands and no stage's topic.
REPLAYABLE = frozenset({"job-commands"})


class Operations:
    """One lag monitor per API instance, kept across requests so the status words see movement;
    every caller's sample adds to the same windows."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._lag: LagInChild | None = None

    def lag(self, stages: tuple[str, ...], window: int) -> dict:
        with self._lock:
            if self._lag is None:
                self._lag = LagInChild(self.settings, LAG_WINDOW)  # an abort in librdkafka ends only it
            return self._lag.sample(stages, window)

    def close(self) -> None:
        with self._lock:
            if self._lag is not None:
                self._lag.close()
                self._lag = None


async def operations_of(request: Request) -> Operations:
    # async: read on the event loop, without a worker thread of its own
    return request.app.state.operations
