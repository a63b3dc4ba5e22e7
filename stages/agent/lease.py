"""The agent's lease, as plain bookkeeping: no Kafka, no clock of its own (each call is given
`now`, a time.monotonic() reading, and `wall`, a time.time() one, where the saved form needs it).

The agent's runs may go on while its reports reach the broker. Each report the broker
acknowledged extends the lease to (when that report was sent) + lease; once it has run out the
agent kills its runs, as the host manager will call them lost and run them elsewhere, and takes
no launches until a report gets through again. A launch read with less than the start margin of
lease left, or while fenced, is held: started once a report renews the lease in time, answered
lost once its deadline passes without one.

In a control-plane outage (most agents cut off at once: stages/agent/outage.py) the lease is kept
instead: extended a lease at a time while the outage lasts, up to the outage limit past the end it
began at, and no launch starts until a report gets through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# How much of the lease margin (the host manager's wait past the lease) a held launch may wait
# for a report to renew the lease; the rest is slack for the host manager's side.
HOLD_SHARE = 0.75


@dataclass(slots=True)
class Held:
    """A launch read when the lease was about to run out, or had: it waits for a report."""

    host_id: str
    launch: dict  # the AgentLaunch record
    partition: int  # where its command lies, which a restart reads again while it is held
    offset: int
    until: float  # time.monotonic() past which it is answered lost, unless a report renews the lease


class Lease:
    def __init__(self, lease_s: float, start_margin: float, until: float) -> None:
        self.lease_s = lease_s
        self.until = until  # time.monotonic() when the lease runs out
        self.fenced_at: float | None = None  # when the lease ran out, while it stays out
        self.start_margin = start_margin
        self.hold_s = HOLD_SHARE * start_margin
        self.held: dict[str, Held] = {}  # task id -> its launch, waiting for a report
        self.kept_from: float | None = None  # the end an outage kept the runs past, while it lasts

    @classmethod
    def restored(cls, lease_s: float, start_margin: float, saved: object, now: float, wall: float) -> Lease:
        """The lease a restarted agent still holds (its adopted runs live by it), from lease.json's
        wall-clock form; a whole lease from now when none was saved."""
        until = saved.get("until") if isinstance(saved, dict) else None
        if not isinstance(until, (int, float)):
            return cls(lease_s, start_margin, now + lease_s)
        return cls(lease_s, start_margin, now + (until - wall))

    def saved(self, now: float, wall: float) -> dict:
        """lease.json's form: when the lease runs out, in seconds since the epoch."""
        return {"until": self.wall_until(now, wall)}

    def wall_until(self, now: float, wall: float) -> float:
        return wall + (self.until - now)

    @property
    def fenced(self) -> bool:
        return self.fenced_at is not None

    def runs_out(self, now: float) -> bool:
        """Whether the lease has just run out: the agent fences itself."""
        return self.fenced_at is None and now >= self.until

    def fence(self, now: float) -> None:
        self.fenced_at = now
        self.kept_from = None

    def ends_within(self, now: float, ahead_s: float) -> bool:
        """Whether the lease, not fenced, ends within `ahead_s`."""
        return self.fenced_at is None and self.until - now <= ahead_s

    def keep(self, now: float, limit_s: float) -> bool:
        """A control-plane outage: the runs go on for another lease from now, never past `limit_s`
        after the end the outage began at. False once that limit is reached: the agent fences."""
        if self.kept_from is None:
            self.kept_from = self.until
        cap = self.kept_from + limit_s
        if now >= cap:
            return False
        self.until = max(self.until, min(now + self.lease_s, cap))
        return True

    def holds_for(self, now: float) -> float:
        """How much longer the runs here may go on (0: fenced, or out): what a host manager that
        no longer hears this agent is told when it asks."""
        return 0.0 if self.fenced_at is not None else max(0.0, self.until - now)

    def admits(self, now: float) -> bool:
        """Whether a launch read now may start: not fenced nor kept through an outage, and the
        margin of lease left."""
        return self.fenced_at is None and self.kept_from is None and self.until - now >= self.start_margin

    def may_hold(self, now: float) -> bool:
        """Whether a launch that may not start now may wait for a report; else the host manager
        may already run it elsewhere."""
        return now <= self.until + self.hold_s

    def hold(self, task_id: str, host_id: str, launch: dict, partition: int, offset: int) -> None:
        self.held[task_id] = Held(host_id, launch, partition, offset, self.until + self.hold_s)

    def drop(self, task_id: str) -> Held | None:
        """A held launch taken back (killed before it started), or None."""
        return self.held.pop(task_id, None)

    def overdue(self, now: float) -> list[tuple[str, Held]]:
        """The held launches whose deadline passed with no report, taken back: the host manager
        may have given the host up, and their runs with it."""
        late = [t for t, h in self.held.items() if now > h.until]
        return [(task_id, self.held.pop(task_id)) for task_id in late]

    def release(self) -> dict[str, Held]:
        """Every held launch, taken back (started, or answered at a stop)."""
        held, self.held = self.held, {}
        return held

    def renewed(self, sent: float, now: float) -> bool:
        """A round of reports sent at `sent` was acknowledged: the lease runs to sent + lease, the
        held launches still in time wait as long past it, and a lease that had run out before
        that report was sent holds again. True when it was fenced and is no more."""
        self.until = max(self.until, sent + self.lease_s)
        self.kept_from = None  # the brokers answer: no outage here any more
        for held in self.held.values():
            # This report was written before the held launch's deadline, so before the host
            # manager could judge the host silent (its wait is lease + margin from the report
            # the deadline came from): it reads this one first, and the new lease holds.
            if now <= held.until:
                held.until = max(held.until, self.until + self.hold_s)
        if self.fenced_at is not None and sent > self.fenced_at:
            self.fenced_at = None
            return True
        return False

    def before_held(self, offsets: Mapping[int, int | None]) -> dict[int, int]:
        """These offsets (partition -> every command before it handled), none past a launch still
        held: held, it counts as not read yet, for a restart (it is not in runs.json, and would be
        lost) as for the host manager (which would give it up as read and not run)."""
        out = {p: o for p, o in offsets.items() if o is not None}
        for held in self.held.values():
            if held.partition in out:
                out[held.partition] = min(out[held.partition], held.offset)
        return out

    def status(self, now: float) -> str:
        """The lease's part of the agent's status line."""
        text = (f"fenced for {now - self.fenced_at:.0f}s" if self.fenced_at is not None
                else f"lease {self.until - now:.0f}s left")
        if self.kept_from is not None:
            text += f", kept through a control-plane outage for {now - self.kept_from:.0f}s"
        if self.held:
            text += f", {len(self.held)} launches held for a report"
        return text
