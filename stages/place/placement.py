"""Host selection. Pure: no Kafka.

Small steps chained together in Nomad's style: feasibility checks (capacity, maintenance state,
label constraints) filter hosts, a ranking orders them (first fit for now), and a gang is placed
only when every one of its tasks finds a host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from peloton.model.constraint import Constraint, constraint_from_json, evaluate
from peloton.model.resources import ZERO, Resources


@dataclass(slots=True)
class HostView:
    host_id: str
    shard: int
    capacity: Resources
    allocated: Resources = ZERO  # as the host manager last reported it
    labels: dict[str, str] = field(default_factory=dict)
    state: str = "UP"
    # Placements made here that the host manager has not reported yet: id -> (expiry, resources),
    # and their sum, kept as they come and go: free() runs for every host a gang looks at, and a
    # busy host has hundreds of placements in flight.
    pending: dict[str, tuple[float, Resources]] = field(default_factory=dict)
    pending_sum: Resources = ZERO
    next_expiry: float = math.inf

    def add_pending(self, placement_id: str, expiry: float, r: Resources) -> None:
        before = self.pending.get(placement_id, (0.0, ZERO))[1]
        self.pending[placement_id] = (expiry, before + r)
        self.pending_sum = self.pending_sum + r
        self.next_expiry = min(self.next_expiry, expiry)

    def applied(self, placement_id: str) -> None:
        """The host manager's report covers this placement: `allocated` holds it now."""
        entry = self.pending.pop(placement_id, None)
        if entry is not None:
            self.pending_sum = self.pending_sum - entry[1] if self.pending else ZERO

    def free(self, now: float) -> Resources:
        if now >= self.next_expiry:  # the host manager's reports must have covered these by now
            self.pending = {pid: e for pid, e in self.pending.items() if e[0] > now}
            self.pending_sum = sum((r for _, r in self.pending.values()), ZERO)
            self.next_expiry = min((e for e, _ in self.pending.values()), default=math.inf)
        return self.capacity - (self.allocated + self.pending_sum)


@dataclass(slots=True)
class TaskNeed:
    task_id: str
    resources: Resources
    constraint: Constraint | None
    labels: dict[str, str]

    @staticmethod
    def from_spec(spec: dict) -> TaskNeed:
        """Raises ConstraintError for a constraint_json that is not a valid constraint: any
        producer can write launch specs, and a bad one must fail here, as it is decoded, not
        in the middle of placing a gang."""
        c = spec.get("constraint_json")
        return TaskNeed(spec["task_id"], Resources.from_record(spec["resources"]),
                        constraint_from_json(c) if c else None, spec.get("labels") or {})


def place_gang(needs: list[TaskNeed], hosts: list[HostView], now: float,
               avoid: set[str] = frozenset()) -> dict[str, HostView] | None:
    """First fit, all or nothing: task id -> host for every task, or None if any task finds none.

    Later tasks of the gang see what earlier ones took (a tentative ledger per host). Hosts in
    `avoid` (where earlier runs failed) are tried only after every other host."""
    if avoid:
        hosts = [h for h in hosts if h.host_id not in avoid] + [h for h in hosts if h.host_id in avoid]
    taken: dict[str, Resources] = {}
    labels_on: dict[str, list[dict[str, str]]] = {}
    free_now: dict[str, Resources] = {}
    result: dict[str, HostView] = {}
    for need in needs:
        chosen = None
        for host in hosts:
            if host.state != "UP":
                continue
            free = free_now.get(host.host_id)
            if free is None:
                free = free_now[host.host_id] = host.free(now)
            if not (taken.get(host.host_id, ZERO) + need.resources).fits_in(free):
                continue
            if not evaluate(need.constraint, host.labels, labels_on.get(host.host_id, [])):
                continue
            chosen = host
            break
        if chosen is None:
            return None
        taken[chosen.host_id] = taken.get(chosen.host_id, ZERO) + need.resources
        labels_on.setdefault(chosen.host_id, []).append(need.labels)
        result[need.task_id] = chosen
    return result


def explain(needs: list[TaskNeed], hosts: list[HostView], now: float) -> str:
    """Why a gang found no hosts, with counts per reason (Nomad's filter metrics): for the first
    task that fits on no host by itself, how many hosts fail each check; otherwise the gang as a
    whole does not fit on the room free now."""
    for need in needs:
        down = short = refused = 0
        lacking: dict[str, int] = {}
        for host in hosts:
            if host.state != "UP":
                down += 1
                continue
            free = host.free(now)
            if not need.resources.fits_in(free):
                short += 1
                for kind in ("cpu", "mem_mb", "disk_mb", "gpu"):
                    if getattr(need.resources, kind) > getattr(free, kind) + 0.0009:
                        lacking[kind] = lacking.get(kind, 0) + 1
                continue
            if not evaluate(need.constraint, host.labels, []):
                refused += 1
                continue
            break  # this task fits somewhere
        else:
            if not hosts:
                return "no hosts are known yet"
            parts = []
            if short:
                kinds = ", ".join(f"{k} on {n}" for k, n in sorted(lacking.items()))
                parts.append(f"{short} without room ({kinds})")
            if refused:
                parts.append(f"{refused} refused by its constraint")
            if down:
                parts.append(f"{down} not UP")
            return f"task {need.task_id} fits on none of {len(hosts)} hosts: " + "; ".join(parts)
    return f"the gang's {len(needs)} tasks do not fit together on the room the hosts have free now"
