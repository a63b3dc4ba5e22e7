"""A watchdog on a loop's turns: when none has ended for STUCK_S, every thread's stack goes to
stderr (the process's log), so a wait that never ends shows where it is. Waiting out a broker or
store outage inside one turn writes it once, which is harmless."""

from __future__ import annotations

import faulthandler
import time

STUCK_S = 60.0
# faulthandler's timer is a thread, started again (and the last one joined) by each arming, too
# dear for every turn of every stage. Armed again this often instead, for STUCK_S past it: it
# fires between STUCK_S and STUCK_S + REARM_S after a turn sticks.
REARM_S = 5.0


class StuckWatch:
    def __init__(self, stuck_s: float = STUCK_S, rearm_s: float = REARM_S):
        self.stuck_s, self.rearm_s = stuck_s, rearm_s
        self._armed = float("-inf")

    def turn(self) -> None:
        """Called as each turn begins."""
        now = time.monotonic()
        if now - self._armed >= self.rearm_s:
            faulthandler.dump_traceback_later(self.stuck_s + self.rearm_s)
            self._armed = now

    def stop(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        self._armed = float("-inf")
