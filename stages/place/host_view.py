"""One host as a place instance sees it: what the host manager last reported, plus this instance's
placements there that no report covers yet. Pure: no Kafka. The checks (checks.py), the rankers
(rank.py) and the placement loop (placement.py) all read it."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from peloton.model.resources import ZERO, Resources, ResourceSum, clamped

DEFAULT_PORT_RANGES: tuple[tuple[int, int], ...] = ((31000, 32000),)


@dataclass(slots=True)
class PendingPlacement:
    """What one placement of this instance adds to a host until the host manager reports it:
    its tasks' resources, label counts, tasks per job and ports."""

    expiry: float
    resources: Resources = ZERO
    task_labels: dict[tuple[str, str], int] = field(default_factory=dict)
    job_tasks: dict[str, int] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)
    revocable_cpu: float = 0.0  # its revocable tasks' cpu, on the host's slack


@dataclass(slots=True, eq=False)
class HostView:
    """One host as this place instance sees it: what the host manager last reported, plus the
    placements this instance made there that no report covers yet.

    `allocated` is the reported part alone (free() adds the pending sum); `task_labels`,
    `job_tasks` and `used_ports` hold both parts, so a check reads one dict. Update the reported
    part with report(), which keeps the pending part on top; a placement leaves the pending part
    when applied() says a report covers it or when its expiry passes."""

    host_id: str
    shard: int
    capacity: Resources
    allocated: Resources = ZERO
    labels: dict[str, str] = field(default_factory=dict)
    state: str = "UP"
    port_ranges: tuple[tuple[int, int], ...] = DEFAULT_PORT_RANGES  # inclusive
    task_labels: dict[tuple[str, str], int] = field(default_factory=dict)  # (key, value) -> tasks
    job_tasks: dict[str, int] = field(default_factory=dict)  # job id -> tasks on the host
    used_ports: set[int] = field(default_factory=set)
    # Revocable runs' cpu (not in `allocated`), and what non-revocable runs hold but do not use:
    # revocable tasks take cpu from the slack, capacity - allocated + unused_cpu - revocable_cpu.
    revocable_cpu: float = 0.0
    unused_cpu: float = 0.0
    # Placements not reported yet, and their resources summed as they come and go: free() runs
    # for every host a task looks at, and a busy host has hundreds of placements in flight.
    pending: dict[str, PendingPlacement] = field(default_factory=dict)
    _pending: ResourceSum = field(default_factory=ResourceSum, init=False, repr=False)
    _pending_revocable: float = field(default=0.0, init=False, repr=False)
    next_expiry: float = math.inf
    _expiries: list[tuple[float, str]] = field(default_factory=list, init=False, repr=False)  # a heap
    _reported_ports: frozenset[int] = field(default=frozenset(), init=False, repr=False)
    # free() is asked for every host every task looks at: its last answer and what it came from
    _free: Resources = field(default=ZERO, init=False, repr=False)
    _free_of: tuple = field(default=(None, None), init=False, repr=False)
    _free_stale: bool = field(default=True, init=False, repr=False)  # the pending sum moved since

    def __post_init__(self) -> None:
        self._reported_ports = frozenset(self.used_ports)

    def report(self, allocated: Resources, task_labels: Mapping[tuple[str, str], int] | None = None,
               job_tasks: Mapping[str, int] | None = None, used_ports: Iterable[int] | None = None,
               revocable_cpu: float = 0.0, unused_cpu: float = 0.0) -> None:
        """The host manager's latest numbers for the host. Placements still pending stay counted
        on top; the caller then calls applied() for those the report covers. None: the report
        does not carry that part, the current one stays."""
        self.allocated = allocated
        self.revocable_cpu, self.unused_cpu = revocable_cpu, unused_cpu
        if task_labels is not None:
            counts = dict(task_labels)
            for p in self.pending.values():
                _add_counts(counts, p.task_labels)
            self.task_labels = counts
        if job_tasks is not None:
            jobs = dict(job_tasks)
            for p in self.pending.values():
                _add_counts(jobs, p.job_tasks)
            self.job_tasks = jobs
        if used_ports is not None:
            self._reported_ports = frozenset(used_ports)
            self.used_ports = set(self._reported_ports)
            for p in self.pending.values():
                self.used_ports.update(p.ports)

    def add_pending(self, placement_id: str, expiry: float, resources: Resources,
                    labels: Mapping[str, str] | None = None, job_id: str | None = None,
                    ports: Iterable[int] = (), revocable: bool = False) -> None:
        """One task of a placement made here: everything a later gang must see (its resources,
        labels, job and ports) counts on this host until applied() or the expiry. Calls with
        the same placement id add up (a placement of several tasks on one host). A revocable
        task's cpu counts on the host's slack."""
        entry = self.pending.get(placement_id)
        if entry is None:
            entry = self.pending[placement_id] = PendingPlacement(expiry)
            heapq.heappush(self._expiries, (expiry, placement_id))
        elif entry.expiry != expiry:
            entry.expiry = expiry
            heapq.heappush(self._expiries, (expiry, placement_id))  # the old heap entry is skipped
        self.next_expiry = self._expiries[0][0]
        if revocable:
            entry.revocable_cpu += resources.cpu
            self._pending_revocable += resources.cpu
            resources = resources.without_cpu()
        entry.resources = resources if entry.resources is ZERO else entry.resources + resources
        self._pending.add(resources)
        self._free_stale = True
        if labels:
            for kv in labels.items():
                entry.task_labels[kv] = entry.task_labels.get(kv, 0) + 1
                self.task_labels[kv] = self.task_labels.get(kv, 0) + 1
        if job_id is not None:
            entry.job_tasks[job_id] = entry.job_tasks.get(job_id, 0) + 1
            self.job_tasks[job_id] = self.job_tasks.get(job_id, 0) + 1
        for port in ports:
            entry.ports.append(port)
            self.used_ports.add(port)

    def applied(self, placement_id: str) -> None:
        """The host manager's report covers this placement: the reported part holds it now."""
        entry = self.pending.pop(placement_id, None)
        if entry is not None:
            self._forget(entry)

    def expire(self, now: float) -> None:
        """Drop the placements whose expiry passed: the host manager's reports must have covered
        them by now. Each placement leaves the heap once, so this is O(log n) per placement."""
        heap = self._expiries
        while heap and heap[0][0] <= now:
            _, pid = heapq.heappop(heap)
            entry = self.pending.get(pid)
            if entry is not None and entry.expiry <= now:
                del self.pending[pid]
                self._forget(entry)
        self.next_expiry = heap[0][0] if heap else math.inf

    def free(self, now: float) -> Resources:
        if now >= self.next_expiry:
            self.expire(now)
        # Recomputed only when the pending sum moved or capacity or allocated is a new value
        # (Resources are immutable, and a caller may assign either directly); as
        # capacity - (allocated + pending), one Resources made rather than three.
        basis = self._free_of
        if self._free_stale or basis[0] is not self.capacity or basis[1] is not self.allocated:
            c, a, p = self.capacity, self.allocated, self._pending
            self._free_of, self._free_stale = (c, a), False
            self._free = Resources(clamped(c.cpu - (a.cpu + p.cpu)), clamped(c.mem_mb - (a.mem_mb + p.mem_mb)),
                                   clamped(c.disk_mb - (a.disk_mb + p.disk_mb)), clamped(c.gpu - (a.gpu + p.gpu)))
        return self._free

    def slack_free(self, now: float) -> Resources:
        """free(), with the cpu a revocable task may take: the host's slack less what revocable
        runs hold and this instance placed on it."""
        free = self.free(now)
        c, a, p = self.capacity, self.allocated, self._pending
        cpu = clamped(c.cpu - (a.cpu + p.cpu) + self.unused_cpu - self.revocable_cpu - self._pending_revocable)
        return Resources(cpu, free.mem_mb, free.disk_mb, free.gpu)

    def room(self, now: float, revocable: bool) -> Resources:
        return self.slack_free(now) if revocable else self.free(now)

    @property
    def pending_sum(self) -> Resources:
        """What this instance's placements not reported yet take on the host, together."""
        return self._pending.value

    def _forget(self, entry: PendingPlacement) -> None:
        if entry.revocable_cpu:
            self._pending_revocable = max(0.0, self._pending_revocable - entry.revocable_cpu) if self.pending else 0.0
        if self.pending:
            self._pending.take(entry.resources)
        else:
            self._pending.clear()  # none left: no rounding left behind either
        self._free_stale = True
        _subtract_counts(self.task_labels, entry.task_labels)
        _subtract_counts(self.job_tasks, entry.job_tasks)
        for port in entry.ports:
            if port not in self._reported_ports:
                self.used_ports.discard(port)


def _add_counts(into: dict, counts: Mapping) -> None:
    for key, n in counts.items():
        into[key] = into.get(key, 0) + n


def _subtract_counts(into: dict, counts: Mapping) -> None:
    for key, n in counts.items():
        left = into.get(key, 0) - n
        if left > 0:
            into[key] = left
        else:
            into.pop(key, None)
