"""Per-pool queues, admission and the choice of preemption victims. Pure: no Kafka, no store.

Admission follows Peloton's resource manager (docs in ../shared/peloton/RESOURCE_MANAGER.md):
a gang is admitted whole when, with its summed resources added,
  - non-revocable: the pool's non-slack allocation stays within its non-slack entitlement;
  - revocable: the pool's slack allocation stays within its slack entitlement;
  - a controller gang (one controller task): controller allocation within
    reservation * controllerLimit%;
  - a non-preemptible gang: non-preemptible allocation within the reservation.
A gang that fails only the controller, non-preemptible or revocable rule moves to a side queue of
that kind and does not block its pool; the side queues go first, in that order. A gang that fails
the entitlement blocks its pool (so a big gang is not starved by small ones behind it), for at
most the head-of-line timeout.

Admission is planned, then applied: `plan_admission` decides without changing the ledger or the
queue, the stage records the plan in the store, and only then `apply_admission` takes the gangs
off the queue and charges them. A store failure in between leaves the pool as it was.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from peloton.model.resources import EPS, ZERO, Allocations, Resources, ResourceSum

KINDS = ("cpu", "mem_mb", "disk_mb", "gpu")

# Side queues, in the order they are drained before the pool's main queue.
NON_PREEMPTIBLE, CONTROLLER, REVOCABLE = "non-preemptible", "controller", "revocable"
SIDE_QUEUES = (NON_PREEMPTIBLE, CONTROLLER, REVOCABLE)
ENTITLEMENT = "entitlement"


@dataclass(slots=True, eq=False)
class QueuedGang:
    gang: dict  # the GangDemand record
    demand: Resources  # summed over its tasks
    priority: int
    seq: int
    not_before_ms: int = 0  # sent back by placement: not admitted again before this time
    record: object = None  # the Record it came in, for a dead letter if it must be refused
    blocked_since: float | None = None  # when it first failed to fit at the head of its queue
    side: str | None = None  # the side queue it waits in, if any
    removed: bool = False

    @property
    def revocable(self) -> bool:
        return bool(self.gang.get("revocable", False))

    @property
    def preemptible(self) -> bool:
        return bool(self.gang.get("preemptible", True))

    @property
    def controller(self) -> bool:
        tasks = self.gang["tasks"]
        return len(tasks) == 1 and bool(tasks[0].get("controller", False))


def gang_demand(gang: dict) -> Resources:
    cpu = mem = disk = gpu = 0.0
    for t in gang["tasks"]:
        r = t["resources"]
        cpu += r["cpu"]
        mem += r["mem_mb"]
        disk += r["disk_mb"]
        gpu += r["gpu"]
    return Resources(cpu, mem, disk, gpu)


class PoolQueue:
    """Peloton's PriorityFIFO: higher priority first, first come first within a priority.

    One FIFO per priority, so admission can walk past a blocked head in order; removal from
    the middle marks the entry and the FIFO drops it when it reaches the front."""

    _seq = itertools.count()

    def __init__(self) -> None:
        self._fifos: dict[int, deque[QueuedGang]] = {}
        self._priorities: list[int] = []  # descending
        self._len = 0
        self.gang_ids: set[str] = set()
        self._by_task: dict[str, QueuedGang] = {}
        self._demand = ResourceSum()  # non-revocable gangs
        self._slack_demand = ResourceSum()  # revocable gangs

    @property
    def demand(self) -> Resources:
        """What the queued non-revocable gangs ask for."""
        return self._demand.value

    @property
    def slack_demand(self) -> Resources:
        """What the queued revocable gangs ask for."""
        return self._slack_demand.value

    def push(self, gang: dict, seq: int | None = None, not_before_ms: int = 0,
             record: object = None) -> QueuedGang:
        q = QueuedGang(gang, gang_demand(gang), gang["priority"], next(self._seq) if seq is None else seq,
                       not_before_ms, record)
        if q.priority not in self._fifos:
            self._fifos[q.priority] = deque()
            self._priorities = sorted(self._fifos, reverse=True)
        fifo = self._fifos[q.priority]
        if fifo and fifo[-1].seq > q.seq:  # rebuilt from the store out of order: keep seq order
            fifo.append(q)
            self._fifos[q.priority] = deque(sorted(fifo, key=lambda x: x.seq))
        else:
            fifo.append(q)
        self._len += 1
        self.gang_ids.add(gang["gang_id"])
        for t in gang["tasks"]:
            self._by_task[t["task_id"]] = q
        (self._slack_demand if q.revocable else self._demand).add(q.demand)
        return q

    def __iter__(self) -> Iterator[QueuedGang]:
        """Gangs in admission order (side queues aside)."""
        for p in self._priorities:
            for q in self._fifos[p]:
                if not q.removed:
                    yield q

    def head(self) -> QueuedGang | None:
        return next(iter(self), None)

    def remove(self, q: QueuedGang) -> None:
        if q.removed:
            return
        q.removed = True
        self._len -= 1
        self.gang_ids.discard(q.gang["gang_id"])
        for t in q.gang["tasks"]:
            if self._by_task.get(t["task_id"]) is q:
                del self._by_task[t["task_id"]]
        (self._slack_demand if q.revocable else self._demand).take(q.demand)
        fifo = self._fifos[q.priority]
        while fifo and fifo[0].removed:
            fifo.popleft()

    def drop_task(self, task_id: str) -> tuple[QueuedGang, QueuedGang | None] | None:
        """Take one task run out of the gang queued with it (the run ended before admission: a
        stop). Returns (the gang as it was, the gang without it or None), or None if no queued
        gang holds the run. The rest of the gang keeps its place in the queue."""
        q = self._by_task.get(task_id)
        if q is None or q.removed:
            return None
        self.remove(q)
        rest = [t for t in q.gang["tasks"] if t["task_id"] != task_id]
        if not rest:
            return q, None
        return q, self.push({**q.gang, "tasks": rest}, q.seq, q.not_before_ms, q.record)

    def pop(self) -> QueuedGang:
        q = self.head()
        if q is None:
            raise IndexError("pop from an empty pool queue")
        self.remove(q)
        return q

    def __len__(self) -> int:
        return self._len


@dataclass(slots=True)
class Charge:
    """One admitted task run, as admission and preemption need to know it."""

    task_id: str
    gang_id: str
    resources: Resources
    priority: int = 0
    preemptible: bool = True
    revocable: bool = False
    controller: bool = False
    admitted_ms: int = 0


@dataclass(slots=True)
class PoolLedger:
    """What a pool may hold and holds: one charge per admitted task run, with the running totals
    each admission rule compares (Peloton's total, slack, non-preemptible and controller
    allocations)."""

    entitlement: Resources = ZERO
    non_slack_entitlement: Resources | None = None  # None: the whole entitlement
    slack_entitlement: Resources = ZERO
    reservation: Resources | None = None  # None: no reservation rule (tests of the queue alone)
    controller_limit_pct: float = 100.0
    held: Allocations = field(default_factory=Allocations)
    slack: Allocations = field(default_factory=Allocations)
    non_preemptible: Allocations = field(default_factory=Allocations)
    controller: Allocations = field(default_factory=Allocations)
    charges: dict[str, Charge] = field(default_factory=dict)
    preempting: dict[str, Resources] = field(default_factory=dict)  # victims chosen, not yet released

    def charge(self, c: Charge) -> None:
        if c.task_id in self.charges:
            return
        self.charges[c.task_id] = c
        self.held.charge(c.task_id, c.resources)
        if c.revocable:
            self.slack.charge(c.task_id, c.resources)
        if not c.preemptible:
            self.non_preemptible.charge(c.task_id, c.resources)
        if c.controller:
            self.controller.charge(c.task_id, c.resources)

    def release(self, task_id: str) -> bool:
        self.charges.pop(task_id, None)
        self.preempting.pop(task_id, None)
        for part in (self.slack, self.non_preemptible, self.controller):
            part.release(task_id)
        return self.held.release(task_id)

    @property
    def non_slack_allocation(self) -> Resources:
        return self.held.total - self.slack.total

    def non_slack_room(self) -> Resources:
        cap = self.entitlement if self.non_slack_entitlement is None else self.non_slack_entitlement
        return cap - self.non_slack_allocation


def _add(room: list[float], r: Resources, sign: float) -> None:
    room[0] += sign * r.cpu
    room[1] += sign * r.mem_mb
    room[2] += sign * r.disk_mb
    room[3] += sign * r.gpu


def _fits(r: Resources, room: list[float]) -> bool:
    return (r.cpu <= room[0] + EPS and r.mem_mb <= room[1] + EPS
            and r.disk_mb <= room[2] + EPS and r.gpu <= room[3] + EPS)


def _room(limit: Resources, used: Resources) -> list[float]:
    return [getattr(limit, k) - getattr(used, k) for k in KINDS]


class _Rooms:
    """The room each admission rule leaves in a pool, updated as gangs are chosen."""

    def __init__(self, ledger: PoolLedger):
        cap = ledger.entitlement if ledger.non_slack_entitlement is None else ledger.non_slack_entitlement
        self.non_slack = _room(cap, ledger.non_slack_allocation)
        self.slack = _room(ledger.slack_entitlement, ledger.slack.total)
        big = Resources(math.inf, math.inf, math.inf, math.inf)
        reservation = big if ledger.reservation is None else ledger.reservation
        self.non_preemptible = _room(reservation, ledger.non_preemptible.total)
        controller_cap = big if ledger.reservation is None else reservation.scaled(ledger.controller_limit_pct / 100.0)
        self.controller = _room(controller_cap, ledger.controller.total)

    def failed_rule(self, q: QueuedGang) -> str | None:
        """The first rule the gang fails, or None when it may be admitted now."""
        if q.revocable:
            return None if _fits(q.demand, self.slack) else REVOCABLE
        if not _fits(q.demand, self.non_slack):
            return ENTITLEMENT
        if not q.preemptible and not _fits(q.demand, self.non_preemptible):
            return NON_PREEMPTIBLE
        if q.controller and not _fits(q.demand, self.controller):
            return CONTROLLER
        return None

    def take(self, q: QueuedGang) -> None:
        _add(self.slack if q.revocable else self.non_slack, q.demand, -1)
        if not q.preemptible:
            _add(self.non_preemptible, q.demand, -1)
        if q.controller:
            _add(self.controller, q.demand, -1)


def plan_admission(queue: PoolQueue, ledger: PoolLedger, now: float = 0.0,
                   head_of_line_timeout: float = math.inf, limit: int = 1000,
                   now_ms: int = 0) -> list[QueuedGang]:
    """The gangs to admit now, in order, each as a unit within every rule.

    Side queues first (non-preemptible, controller, revocable): each is a FIFO whose head blocks
    only that side queue. Then the main queue: a gang that fails only a side rule moves to that
    side queue; one that fails the entitlement blocks the pool, but only for
    `head_of_line_timeout` seconds: after that, gangs behind it that fit go first, so one gang
    that cannot fit does not stop its pool for ever. Gangs in their placement backoff are
    skipped. Changes nothing but the gangs' `side` and `blocked_since`."""
    rooms = _Rooms(ledger)
    admitted: list[QueuedGang] = []
    waiting = [q for q in queue if q.not_before_ms <= now_ms]
    for side in SIDE_QUEUES:
        for q in waiting:
            if q.side != side or len(admitted) >= limit:
                continue
            if rooms.failed_rule(q) is None:
                rooms.take(q)
                admitted.append(q)
            else:
                break  # its head blocks this side queue only
    passing = False  # walking past a head blocked beyond the bound
    for q in waiting:
        if q.side is not None:
            continue
        if len(admitted) >= limit:
            break
        rule = rooms.failed_rule(q)
        if rule is None:
            rooms.take(q)
            admitted.append(q)
            continue
        if rule != ENTITLEMENT:
            q.side = rule
            continue
        if q.blocked_since is None:
            q.blocked_since = now
        if not passing:
            if now - q.blocked_since < head_of_line_timeout:
                break
            passing = True
    return admitted


def apply_admission(queue: PoolQueue, ledger: PoolLedger, admitted: list[QueuedGang], admitted_ms: int = 0,
                    charges: dict[str, list[Charge]] | None = None) -> None:
    """Take the gangs off their queue and charge their tasks to the ledger. `charges`: each gang's
    (by gang id), where the caller has made them already."""
    for q in admitted:
        queue.remove(q)
        for c in charges[q.gang["gang_id"]] if charges is not None else charges_of(q, admitted_ms):
            ledger.charge(c)


def charges_of(q: QueuedGang, admitted_ms: int = 0) -> list[Charge]:
    return [Charge(t["task_id"], q.gang["gang_id"], Resources.of_read(t["resources"]), q.priority,
                   q.preemptible, q.revocable, bool(t.get("controller", False)), admitted_ms)
            for t in q.gang["tasks"]]


def admit(queue: PoolQueue, ledger: PoolLedger, now: float = 0.0, head_of_line_timeout: float = math.inf,
          limit: int = 1000) -> list[QueuedGang]:
    """Plan and apply at once (for callers with nothing to record in between)."""
    admitted = plan_admission(queue, ledger, now, head_of_line_timeout, limit)
    apply_admission(queue, ledger, admitted)
    return admitted


def why_waiting(q: QueuedGang, ledger: PoolLedger, now: float, now_ms: int = 0) -> str:
    """Why a queued gang is not admitted yet, with the numbers (Kueue's inadmissible message)."""
    if q.not_before_ms > now_ms:
        return (f"waiting out a backoff (a restart, or a placement that failed): admitted in "
                f"{(q.not_before_ms - now_ms) / 1000:.0f}s at the earliest")
    if q.revocable:
        cap, used, what = ledger.slack_entitlement, ledger.slack.total, "slack entitlement"
    elif q.side == NON_PREEMPTIBLE:
        cap, used = ledger.reservation or ZERO, ledger.non_preemptible.total
        what = "reservation (non-preemptible gangs run only within it)"
    elif q.side == CONTROLLER:
        pct = ledger.controller_limit_pct
        cap = (ledger.reservation or ZERO).scaled(pct / 100)
        used, what = ledger.controller.total, f"controller limit ({pct:g}% of its reservation)"
    else:
        cap = ledger.entitlement if ledger.non_slack_entitlement is None else ledger.non_slack_entitlement
        used, what = ledger.non_slack_allocation, "entitlement"
    room = cap - used
    short = [f"{kind} {getattr(q.demand, kind):g} (free {getattr(room, kind):g} of {getattr(cap, kind):g})"
             for kind in KINDS if getattr(q.demand, kind) > getattr(room, kind) + EPS]
    if short:
        needs = "; ".join(short)
        if not q.demand.fits_in(cap):
            return f"needs more than its pool's {what}: {needs}"
        blocked = f" for {now - q.blocked_since:.0f}s" if q.blocked_since is not None else ""
        return f"waiting for room in its pool's {what}{blocked}: needs {needs}"
    return "waiting behind a higher-priority or earlier gang of its pool"


# -- preemption ----------------------------------------------------------------------------------

def victim_order(c: Charge) -> tuple:
    """Peloton's ranking, as far as entitle can see it: revocable runs first, then the lowest
    priority, then the most recently admitted (entitle does not follow a run's state after
    admission, so READY/PLACING/RUNNING is not part of the order)."""
    return (not c.revocable, c.priority, -c.admitted_ms)


def choose_victims(candidates: Iterable[Charge], owed: Resources) -> list[Charge]:
    """Greedy: in victim order, take each run that frees something still owed; stop when nothing
    is owed. Non-preemptible runs are never chosen."""
    left = [owed.cpu, owed.mem_mb, owed.disk_mb, owed.gpu]
    chosen: list[Charge] = []
    for c in sorted((c for c in candidates if c.preemptible), key=victim_order):
        if all(v <= EPS for v in left):
            break
        r = (c.resources.cpu, c.resources.mem_mb, c.resources.disk_mb, c.resources.gpu)
        if not any(r[i] > EPS and left[i] > EPS for i in range(4)):
            continue  # frees nothing the pool still owes
        chosen.append(c)
        left = [max(0.0, left[i] - r[i]) for i in range(4)]
    return chosen


def over_allocation(ledger: PoolLedger) -> tuple[Resources, Resources]:
    """What the pool holds beyond its non-slack and its slack entitlement, not counting runs
    already being preempted."""
    leaving_slack = ZERO
    leaving = ZERO
    for task_id, r in ledger.preempting.items():
        c = ledger.charges.get(task_id)
        if c is not None and c.revocable:
            leaving_slack = leaving_slack + r
        else:
            leaving = leaving + r
    cap = ledger.entitlement if ledger.non_slack_entitlement is None else ledger.non_slack_entitlement
    return ((ledger.non_slack_allocation - leaving) - cap,
            (ledger.slack.total - leaving_slack) - ledger.slack_entitlement)


def reclaim_victims(ledger: PoolLedger) -> list[Charge]:
    """Inter-pool reclaim: the runs to preempt so the pool holds no more than it is entitled to.
    Non-slack excess is freed from non-revocable runs, slack excess from revocable ones."""
    non_slack_excess, slack_excess = over_allocation(ledger)
    free = [c for c in ledger.charges.values() if c.task_id not in ledger.preempting]
    return (choose_victims([c for c in free if not c.revocable], non_slack_excess)
            + choose_victims([c for c in free if c.revocable], slack_excess))


def priority_victims(q: QueuedGang, ledger: PoolLedger) -> list[Charge]:
    """Intra-pool priority preemption (Peloton lacked it): the lower-priority preemptible runs
    of the pool whose room would let the gang in, or none when even all of them would not."""
    if q.revocable:
        return []
    cap = ledger.entitlement if ledger.non_slack_entitlement is None else ledger.non_slack_entitlement
    if not q.demand.fits_in(cap):
        return []  # no victim makes room the pool is not entitled to
    leaving = ZERO
    for r in ledger.preempting.values():
        leaving = leaving + r
    owed = q.demand - (ledger.non_slack_room() + leaving)
    if owed.fits_in(ZERO):
        return []  # the room is coming: runs already being preempted free it
    lower = [c for c in ledger.charges.values()
             if c.priority < q.priority and not c.revocable and c.task_id not in ledger.preempting]
    victims = choose_victims(lower, owed)
    freed = ZERO
    for c in victims:
        freed = freed + c.resources
    return victims if owed.fits_in(freed) else []
