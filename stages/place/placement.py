"""Host selection for gangs. Pure: no Kafka, no store.

Nomad's scheduler stack in small steps, each module using only those before it: what a task
asks (task_need.py) and a host as this instance sees it (host_view.py); feasibility checks
(checks.py: maintenance state, the GPU rule, room, label constraints, ports), each saying why a
host refuses a task; a ranker chosen by the gang's placement strategy (rank.py: PACK or SPREAD)
that orders the hosts that pass; and here, the walk that places a gang only when every one of
its tasks finds a host (all or nothing).

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

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from peloton.model.quick_init import quick_init
from stages.place.checks import Check, Tentative, checks_for, pick_ports, reason_text, refusal
from stages.place.host_view import HostView
from stages.place.rank import PACK, Ranker, ranker_for, spreads
from stages.place.task_need import TaskNeed

DEFAULT_CANDIDATES = 16  # feasible hosts ranked per task; more ranks better and costs more


@quick_init  # one per task placed
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

    __slots__ = ("_index", "hosts", "pack_at", "rng", "spread_at")

    def __init__(self, hosts: Iterable[HostView] = (), rng: random.Random | None = None):
        self.hosts: list[HostView] = hosts if isinstance(hosts, list) else list(hosts)
        self.rng = rng
        self.pack_at: int | None = None if rng is not None else 0
        self.spread_at: int | None = self.pack_at
        self._index: dict[str, int] | None = None

    def add(self, host: HostView) -> None:
        self.hosts.append(host)

    def interleave_shards(self) -> None:
        """Order the hosts so that hosts next to each other on the ring are of different shards
        (each shard's hosts by id, dealt one from each shard in turn), the cursors staying on the
        hosts they were on. Hosts arrive grouped by shard (host state is read partition by
        partition), and PACK fills the hosts in ring order: without this a burst's placements
        all go to one shard, so one host manager instance launches them while the others wait."""
        by_shard: dict[int, list[HostView]] = {}
        for host in self.hosts:
            by_shard.setdefault(host.shard, []).append(host)
        for hosts in by_shard.values():
            hosts.sort(key=lambda h: h.host_id)
        columns = [by_shard[shard] for shard in sorted(by_shard)]
        order = [column[rank] for rank in range(max(map(len, columns), default=0))
                 for column in columns if rank < len(column)]
        at = {id(h): i for i, h in enumerate(order)}
        pack = self.hosts[self.pack_at] if self.pack_at is not None and self.pack_at < len(self.hosts) else None
        spread = self.hosts[self.spread_at] if self.spread_at is not None and self.spread_at < len(self.hosts) else None
        self.hosts[:] = order
        if pack is not None:
            self.pack_at = at[id(pack)]
        if spread is not None:
            self.spread_at = at[id(spread)]
        self._index = None

    def start(self) -> None:
        """Draw the cursors' first host, once."""
        if self.pack_at is None or self.spread_at is None:
            first = self.rng.randrange(len(self.hosts)) if self.rng is not None and self.hosts else 0
            self.pack_at = first if self.pack_at is None else self.pack_at
            self.spread_at = first if self.spread_at is None else self.spread_at

    def index_of(self, host_id: str) -> int | None:
        """Where the host is in the ring (None: not known here). The index is built on the first
        call and kept up as hosts are added: in-place placements look a host up by id."""
        if self._index is None or len(self._index) != len(self.hosts):
            self._index = {h.host_id: i for i, h in enumerate(self.hosts)}
        return self._index.get(host_id)

    def __len__(self) -> int:
        return len(self.hosts)

    def __iter__(self) -> Iterator[HostView]:
        return iter(self.hosts)


# A candidate host for one task: (rank key, index in the ring, host). Keys end with the host id,
# so tuples never compare hosts.
_Candidate = tuple[tuple, int, HostView]


class LastCandidates:
    """The candidates of the last one-task gang placed, for the next gang of a pass (one of
    place's ticks) to start from. Tasks with identical needs share their candidates within a
    gang; a job's one-task gangs, one after another, are the same case, one call each. Valid only
    while the hosts change by nothing but the placements the caller records on them (each with
    HostView.add_pending before the next call), with the same `now`: so one per pass."""

    __slots__ = ("avoid", "chosen_at", "need", "pool", "resume", "strategy")

    def __init__(self) -> None:
        self.need: TaskNeed | None = None  # None: nothing kept

    def keep(self, need: TaskNeed | None, pool: list[_Candidate], chosen_at: int, resume: int, strategy: str,
             avoid: frozenset | set) -> None:
        self.need, self.pool, self.chosen_at, self.resume = need, pool, chosen_at, resume
        self.strategy, self.avoid = strategy, avoid


def place_gang(needs: Sequence[TaskNeed], hosts: HostRing | Sequence[HostView], now: float,
               strategy: str = PACK, avoid: Iterable[str] = frozenset(), rng: random.Random | None = None,
               candidates: int = DEFAULT_CANDIDATES, last: LastCandidates | None = None,
               ) -> dict[str, Assignment] | None:
    """Hosts for a whole gang: task id -> Assignment for every task, or None when one task finds
    no host (all or nothing; then nothing changes, the ring's cursors included).

    Later tasks of the gang see what earlier ones took (a Tentative share per host); the hosts
    themselves are not changed: the caller records the placement with HostView.add_pending.
    `hosts` is best a HostRing kept by the caller; a plain sequence gets a ring for this call
    only (its cursors start at a host drawn from `rng`, or at the first). Hosts in `avoid` are
    taken only when no other host fits; a task's `prefer_host` (an in-place update's previous host)
    is taken first wherever it fits. `candidates` (at least 1) bounds the feasible hosts
    ranked per task. `last`, kept by the caller for a pass, carries a one-task gang's candidates
    to the next one-task gang (see LastCandidates)."""
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
    if last is not None and last.need is not None and len(needs) == 1 and last.strategy == strategy \
            and last.avoid == avoid:
        pool, chosen_at, previous, resume = last.pool, last.chosen_at, last.need, last.resume
    final = len(needs) - 1
    for i, need in enumerate(needs):
        start = None  # the strategy's cursor
        best: _Candidate | None = None
        preferred = _preferred(need, ring, now, shares, avoid, rank) if need.prefer_host else None
        if preferred is not None:
            pool = [preferred]
        elif pool and previous is not None and need.same_needs(previous):
            # Tasks with identical needs (Peloton places them together): the candidates found
            # for the previous one stand, but for the host it took, which is looked at again.
            _, index, host = pool[chosen_at]
            again = _candidate(need, host, index, now, shares, avoid, rank)
            if again is not None and not spread:
                # PACK: that host's key only fell (less cpu left, the rest as it was) and the
                # others' stand, so while it takes the task it is the best again: nothing else
                # to compare.
                pool[chosen_at] = best = again
            else:
                pool = pool[:chosen_at] + pool[chosen_at + 1:]
                if again is not None:
                    pool.append(again)
                if spread and pool and min(pool)[0][1] > 0:
                    pool = []  # every candidate has a task of the job already
                if not pool:
                    start = resume  # the candidates are used up: walk on past them
        else:
            pool = []
        if best is None:
            if not pool:
                pool, resume = _walk(need, checks_for(need), ring, start, now, shares, avoid, limit, rank, spread)
            if not pool:
                ring.pack_at, ring.spread_at = cursors
                if last is not None:
                    last.need = None
                return None
            best = min(pool)
            chosen_at = pool.index(best)
        _, index, host = best
        share = shares.get(host.host_id)
        ports = pick_ports(need, host, share)
        if i < final:  # what it takes, for the gang's later tasks (none reads it after the last)
            if share is None:
                share = shares[host.host_id] = Tentative()
            share.take(need, ports)
        result[need.task_id] = Assignment(host, ports)
        if spread:
            ring.spread_at = index + 1 if index + 1 < len(ring.hosts) else 0
        else:
            ring.pack_at = index
        previous = need
    if last is not None:  # a gang of several tasks moved its hosts' rank keys: nothing to carry
        last.keep(previous if len(needs) == 1 else None, pool, chosen_at, resume, strategy, avoid)
    return result


def _walk(need: TaskNeed, checks: tuple[Check, ...], ring: HostRing, start: int | None, now: float,
          shares: dict[str, Tentative], avoid: Iterable[str], limit: int, rank: Ranker,
          spread: bool) -> tuple[list[_Candidate], int]:
    """Feasible hosts for one task, walking the ring from `start` (None: the strategy's cursor)
    until `limit` of them are not avoided or the ring is done: the bounded sample, and the full
    scan when the sample falls short. Also returns where the walk stopped."""
    hosts = ring.hosts
    n = len(hosts)
    room = HostView.slack_free if need.revocable else HostView.free
    # place_gang's ring.start() drew both cursors before any walk
    i = (start if start is not None else ring.spread_at if spread else ring.pack_at) % n  # type: ignore[operator]
    found: list[_Candidate] = []
    wanted = limit
    for _ in range(n):
        host = hosts[i]
        share = shares.get(host.host_id) if shares else None
        free = room(host, now)
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


def _preferred(need: TaskNeed, ring: HostRing, now: float, shares: dict[str, Tentative], avoid: Iterable[str],
               rank: Ranker) -> _Candidate | None:
    """The task's preferred host (an in-place update's: where its previous run was), as the only
    candidate, when it is known here and takes the task; else None, and the task is placed as
    any other."""
    index = ring.index_of(need.prefer_host)
    return _candidate(need, ring.hosts[index], index, now, shares, avoid, rank) if index is not None else None


def _candidate(need: TaskNeed, host: HostView, index: int, now: float, shares: dict[str, Tentative],
               avoid: Iterable[str], rank: Ranker) -> _Candidate | None:
    """One host as a candidate for the task (its room net of the gang's share), or None when it
    refuses the task. (_walk does the same inline: it is the placement hot path.)"""
    share = shares.get(host.host_id)
    free = host.room(now, need.revocable)
    if share is not None:
        free = free - share.resources
    if refusal(need, host, free, share) is not None:
        return None
    return (rank(need, host, free, share, host.host_id in avoid), index, host)


# ---------------------------------------------------------------------------------------------
# Why pending


def refusal_counts(need: TaskNeed, hosts: HostRing | Iterable[HostView], now: float) -> dict[str, int]:
    """How many hosts refuse the task, alone, per reason (Nomad's per-node filter metrics):
    each refusing host is counted once, under the first check it fails."""
    counts: dict[str, int] = {}
    for host in hosts:
        reason = refusal(need, host, host.room(now, need.revocable), None)
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
