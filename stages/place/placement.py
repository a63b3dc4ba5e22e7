"""Host selection for gangs. Pure: no Kafka, no store.

Nomad's scheduler stack in small steps: feasibility checks (checks.py: maintenance state, the GPU
rule, room, label constraints, ports) each say why a host refuses a task; a ranker chosen by the
gang's placement strategy (rank.py: PACK or SPREAD) orders the hosts that pass; a gang is placed
only when every one of its tasks finds a host (all or nothing).

Scale: a place instance knows every host of the cluster (50,000 in Peloton's goal) and places
thousands of gangs a second, so a task looks at a bounded set of candidates, not at every host.
The hosts form a ring (`HostRing`); a task walks it from a cursor and stops after `candidates`
feasible hosts, ranks those and takes the best. The walk goes on past infeasible hosts, round the
whole ring if it must, so a task that fits anywhere is always placed: a short sample only ever
costs ranking quality, never a placement. Where the walk starts is the strategy's business:

- PACK starts at the host PACK chose last. That host, partly filled by this instance, leads the
  candidates and, being the most allocated of them, keeps winning until it is full; the walk
  then moves on to the next hosts. Hosts fill one after another (Peloton's fill each host before
  the next) while each task still looks at only `candidates` hosts.
- SPREAD starts just past the host SPREAD chose last. Among the candidates the fewest tasks of
  the same job wins, so a job's gangs one after another land on different hosts; and successive
  walks cover much the same hosts, whose free room is still cached, less the one just taken.
  Within a gang, once every candidate holds a task of the job, the walk goes on past them.

A ring made with a random.Random starts its cursors at a random host, so several place instances
do not all pack the same hosts (and collide at the host manager); without one it starts at the
first host. Either way the choices are deterministic for a given ring, rng and call sequence.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from peloton.model.constraint import Constraint, constraint_from_json
from peloton.model.resources import ZERO, Resources
from stages.place.checks import Check, Tentative, checks_for, pick_ports, reason_text, refusal
from stages.place.rank import PACK, Ranker, ranker_for, spreads

DEFAULT_PORT_RANGES: tuple[tuple[int, int], ...] = ((31000, 32000),)
DEFAULT_CANDIDATES = 16  # feasible hosts ranked per task; more ranks better and costs more
MAX_PORT = 65535


class LaunchSpecError(ValueError):
    """A launch spec's ports that no host could honour (negative counts, ports out of range,
    one static port twice): refused as the spec is decoded, not while placing."""


@dataclass(slots=True)
class PendingPlacement:
    """What one placement of this instance adds to a host until the host manager reports it:
    its tasks' resources, label counts, tasks per job and ports."""

    expiry: float
    resources: Resources = ZERO
    task_labels: dict[tuple[str, str], int] = field(default_factory=dict)
    job_tasks: dict[str, int] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)


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
    # Placements not reported yet, and their resources summed as they come and go: free() runs
    # for every host a task looks at, and a busy host has hundreds of placements in flight.
    pending: dict[str, PendingPlacement] = field(default_factory=dict)
    pending_sum: Resources = ZERO
    next_expiry: float = math.inf
    _expiries: list[tuple[float, str]] = field(default_factory=list, init=False, repr=False)  # a heap
    _reported_ports: frozenset[int] = field(default=frozenset(), init=False, repr=False)
    # free() is asked for every host every task looks at: its last answer and what it came from
    _free: Resources = field(default=ZERO, init=False, repr=False)
    _free_of: tuple = field(default=(None, None, None), init=False, repr=False)

    def __post_init__(self) -> None:
        self._reported_ports = frozenset(self.used_ports)

    def report(self, allocated: Resources, task_labels: Mapping[tuple[str, str], int] | None = None,
               job_tasks: Mapping[str, int] | None = None, used_ports: Iterable[int] | None = None) -> None:
        """The host manager's latest numbers for the host. Placements still pending stay counted
        on top; the caller then calls applied() for those the report covers. None: the report
        does not carry that part, the current one stays."""
        self.allocated = allocated
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
                    ports: Iterable[int] = ()) -> None:
        """One task of a placement made here: everything a later gang must see (its resources,
        labels, job and ports) counts on this host until applied() or the expiry. Calls with
        the same placement id add up (a placement of several tasks on one host)."""
        entry = self.pending.get(placement_id)
        if entry is None:
            entry = self.pending[placement_id] = PendingPlacement(expiry)
            heapq.heappush(self._expiries, (expiry, placement_id))
        elif entry.expiry != expiry:
            entry.expiry = expiry
            heapq.heappush(self._expiries, (expiry, placement_id))  # the old heap entry is skipped
        self.next_expiry = self._expiries[0][0]
        entry.resources = entry.resources + resources
        self.pending_sum = self.pending_sum + resources
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
        # Recomputed only when one of the three is a new value (Resources are immutable, and a
        # caller may assign capacity or allocated directly).
        basis = self._free_of
        if basis[0] is not self.capacity or basis[1] is not self.allocated or basis[2] is not self.pending_sum:
            self._free_of = (self.capacity, self.allocated, self.pending_sum)
            pending = self.pending_sum
            self._free = self.capacity - (self.allocated if pending is ZERO else self.allocated + pending)
        return self._free

    def _forget(self, entry: PendingPlacement) -> None:
        self.pending_sum = self.pending_sum - entry.resources if self.pending else ZERO
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


@dataclass(slots=True)
class TaskNeed:
    """What one task asks of a host, decoded once from its launch spec."""

    task_id: str
    resources: Resources
    constraint: Constraint | None = None
    labels: dict[str, str] = field(default_factory=dict)
    job_id: str = ""
    dynamic_ports: int = 0
    static_ports: tuple[int, ...] = ()

    @staticmethod
    def from_spec(spec: Mapping) -> TaskNeed:
        """Raises ConstraintError for a constraint_json that is not a valid constraint and
        LaunchSpecError for ports no host could give: any producer can write launch specs, and a
        bad one must fail here, as it is decoded, not in the middle of placing a gang.

        Ports: `ports` ([{name, value, env_name}], value 0 = dynamic) wins when present;
        otherwise `dynamic_ports` counts the dynamic ones."""
        c = spec.get("constraint_json")
        dynamic, static = _ports_of(spec)
        return TaskNeed(spec["task_id"], Resources.from_record(spec["resources"]),
                        constraint_from_json(c) if c else None, dict(spec.get("labels") or {}),
                        spec.get("job_id") or "", dynamic, static)

    def same_needs(self, other: TaskNeed) -> bool:
        """Whether a host that takes one takes the other alike (all but the task id equal)."""
        return (self.resources == other.resources and self.constraint == other.constraint
                and self.labels == other.labels and self.job_id == other.job_id
                and self.dynamic_ports == other.dynamic_ports and self.static_ports == other.static_ports)


def port_names(spec: Mapping, ports: tuple[int, ...]) -> dict[str, int]:
    """Name -> port for the ports placement picked, in the order _ports_of reads them
    and pick_ports gives them: static first, in the order the spec names them, then dynamic."""
    named = spec.get("ports") or []
    order = [p["name"] for p in named if p["value"]] + [p["name"] for p in named if not p["value"]]
    order += [f"dynamic-{i}" for i in range(len(ports) - len(order))]
    return dict(zip(order, ports))


def _ports_of(spec: Mapping) -> tuple[int, tuple[int, ...]]:
    ports = spec.get("ports")
    if not ports:  # none named (or a spec from before they were): dynamic_ports counts them
        dynamic = spec.get("dynamic_ports", 0) or 0
        if not _is_int(dynamic) or not 0 <= dynamic <= MAX_PORT:
            raise LaunchSpecError(f"dynamic_ports: expected 0 to {MAX_PORT}, got {dynamic!r}")
        return dynamic, ()
    if not isinstance(ports, list):
        raise LaunchSpecError(f"ports: expected a list, got {type(ports).__name__}")
    dynamic, static = 0, []
    for i, port in enumerate(ports):
        value = port.get("value", 0) if isinstance(port, Mapping) else None
        if not _is_int(value) or not 0 <= value <= MAX_PORT:
            raise LaunchSpecError(f"ports[{i}].value: expected 0 (dynamic) to {MAX_PORT}, got {value!r}")
        if value == 0:
            dynamic += 1
        elif value in static:
            raise LaunchSpecError(f"ports[{i}].value: port {value} is asked for twice")
        else:
            static.append(value)
    return dynamic, tuple(static)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where one task of a gang goes, and the ports it gets there (static ones first, in the
    order the task gave them, then the dynamic ones)."""

    host: HostView
    ports: tuple[int, ...] = ()

    @property
    def host_id(self) -> str:
        return self.host.host_id

    @property
    def shard(self) -> int:
        return self.host.shard


class HostRing:
    """The hosts one place instance knows, in a fixed order, walked as a ring, with where the
    PACK and SPREAD walks go on from (see the module's docstring). Keep one for the life of the
    instance and add() hosts as they appear: the cursors are what makes PACK fill hosts in turn.
    With an rng the cursors start at a random host, drawn when the ring is first walked (the
    hosts are known by then); without one, at the first host. A list given to the ring is used
    as is, not copied."""

    __slots__ = ("hosts", "pack_at", "rng", "spread_at")

    def __init__(self, hosts: Iterable[HostView] = (), rng: random.Random | None = None):
        self.hosts: list[HostView] = hosts if isinstance(hosts, list) else list(hosts)
        self.rng = rng
        self.pack_at: int | None = None if rng is not None else 0
        self.spread_at: int | None = self.pack_at

    def add(self, host: HostView) -> None:
        self.hosts.append(host)

    def start(self) -> None:
        """Draw the cursors' first host, once."""
        if self.pack_at is None or self.spread_at is None:
            first = self.rng.randrange(len(self.hosts)) if self.rng is not None and self.hosts else 0
            self.pack_at = first if self.pack_at is None else self.pack_at
            self.spread_at = first if self.spread_at is None else self.spread_at

    def __len__(self) -> int:
        return len(self.hosts)

    def __iter__(self):
        return iter(self.hosts)


# A candidate host for one task: (rank key, index in the ring, host). Keys end with the host id,
# so tuples never compare hosts.
_Candidate = tuple[tuple, int, HostView]


def place_gang(needs: Sequence[TaskNeed], hosts: HostRing | Sequence[HostView], now: float,
               strategy: str = PACK, avoid: Iterable[str] = frozenset(), rng: random.Random | None = None,
               candidates: int = DEFAULT_CANDIDATES) -> dict[str, Assignment] | None:
    """Hosts for a whole gang: task id -> Assignment for every task, or None when one task finds
    no host (all or nothing; then nothing changes, the ring's cursors included).

    Later tasks of the gang see what earlier ones took (a Tentative share per host); the hosts
    themselves are not changed: the caller records the placement with HostView.add_pending.
    `hosts` is best a HostRing kept by the caller; a plain sequence gets a ring for this call
    only (its cursors start at a host drawn from `rng`, or at the first). Hosts in `avoid` are
    taken only when no other host fits. `candidates` (at least 1) bounds the feasible hosts
    ranked per task."""
    ring = hosts if isinstance(hosts, HostRing) else HostRing(hosts, rng)
    if not needs:
        return {}
    if not ring.hosts:
        return None
    avoid = avoid if isinstance(avoid, (set, frozenset)) else frozenset(avoid)
    limit = max(1, candidates)
    spread = spreads(strategy)
    rank = ranker_for(strategy)
    ring.start()
    cursors = (ring.pack_at, ring.spread_at)
    shares: dict[str, Tentative] = {}
    result: dict[str, Assignment] = {}
    pool: list[_Candidate] = []
    chosen_at = -1  # position in `pool` of the host the previous task took
    previous: TaskNeed | None = None
    resume = 0  # where the last walk stopped
    for need in needs:
        start = None  # the strategy's cursor
        if pool and previous is not None and need.same_needs(previous):
            # Tasks with identical needs (Peloton places them together): the candidates found
            # for the previous one stand, but for the host it took, which is looked at again.
            pool = _retake(pool, chosen_at, need, now, shares, avoid, rank)
            if spread and pool and min(pool)[0][1] > 0:
                pool = []  # every candidate has a task of the job already
            if not pool:
                start = resume  # the candidates are used up: walk on past them
        else:
            pool = []
        if not pool:
            pool, resume = _walk(need, checks_for(need), ring, start, now, shares, avoid, limit, rank, spread)
        if not pool:
            ring.pack_at, ring.spread_at = cursors
            return None
        best = min(pool)
        chosen_at = pool.index(best)
        _, index, host = best
        share = shares.get(host.host_id)
        if share is None:
            share = shares[host.host_id] = Tentative()
        ports = pick_ports(need, host, share)
        share.take(need, ports)
        result[need.task_id] = Assignment(host, ports)
        if spread:
            ring.spread_at = index + 1 if index + 1 < len(ring.hosts) else 0
        else:
            ring.pack_at = index
        previous = need
    return result


def _walk(need: TaskNeed, checks: tuple[Check, ...], ring: HostRing, start: int | None, now: float,
          shares: dict[str, Tentative], avoid: Iterable[str], limit: int, rank: Ranker,
          spread: bool) -> tuple[list[_Candidate], int]:
    """Feasible hosts for one task, walking the ring from `start` (None: the strategy's cursor)
    until `limit` of them are not avoided or the ring is done: the bounded sample, and the full
    scan when the sample falls short. Also returns where the walk stopped."""
    hosts = ring.hosts
    n = len(hosts)
    i = (start if start is not None else ring.spread_at if spread else ring.pack_at) % n
    found: list[_Candidate] = []
    wanted = limit
    for _ in range(n):
        host = hosts[i]
        share = shares.get(host.host_id) if shares else None
        free = host.free(now)
        if share is not None:
            free = free - share.resources
        for check in checks:  # refusal(), inlined: this loop is the placement hot path
            if check(need, host, free, share) is not None:
                break
        else:
            avoided = host.host_id in avoid
            found.append((rank(need, host, free, share, avoided), i, host))
            if not avoided:
                wanted -= 1
                if not wanted:
                    return found, (i + 1) % n
        i += 1
        if i == n:
            i = 0
    return found, i  # round the whole ring: back where it started


def _retake(pool: list[_Candidate], chosen_at: int, need: TaskNeed, now: float, shares: dict[str, Tentative],
            avoid: Iterable[str], rank: Ranker) -> list[_Candidate]:
    """The candidates again for a task like the previous one: only the host that task took has
    changed (its gang share grew), so only that one is checked and ranked again."""
    _, index, host = pool[chosen_at]
    share = shares.get(host.host_id)
    free = host.free(now)
    if share is not None:
        free = free - share.resources
    rest = pool[:chosen_at] + pool[chosen_at + 1:]
    if refusal(need, host, free, share) is None:
        rest.append((rank(need, host, free, share, host.host_id in avoid), index, host))
    return rest


# ---------------------------------------------------------------------------------------------
# Why pending


def refusal_counts(need: TaskNeed, hosts: HostRing | Iterable[HostView], now: float) -> dict[str, int]:
    """How many hosts refuse the task, alone, per reason (Nomad's per-node filter metrics):
    each refusing host is counted once, under the first check it fails."""
    counts: dict[str, int] = {}
    for host in hosts:
        reason = refusal(need, host, host.free(now), None)
        if reason is not None:
            counts[reason] = counts.get(reason, 0) + 1
    return counts


def explain(needs: Sequence[TaskNeed], hosts: HostRing | Sequence[HostView], now: float) -> str:
    """Why a gang found no hosts, for the user: for the first task that fits on no host by
    itself, the count of hosts per reason, largest first; otherwise the gang as a whole does not
    fit on the room free now. Looks at every host, so it is for gangs that gave up, not for
    every try."""
    host_list = hosts.hosts if isinstance(hosts, HostRing) else hosts
    if not host_list:
        return "no hosts are known yet"
    total = len(host_list)
    previous: TaskNeed | None = None
    for need in needs:
        if previous is not None and need.same_needs(previous):
            continue  # the same answer as the task before
        previous = need
        counts = refusal_counts(need, host_list, now)
        if sum(counts.values()) == total:
            parts = [f"{reason_text(reason, need)} on {n:,}"
                     for reason, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
            return (f"task {need.task_id} fits on none of {total:,} host{'' if total == 1 else 's'}: "
                    + "; ".join(parts))
    return f"the gang's {len(needs)} tasks do not fit together on the room the hosts have free now"
