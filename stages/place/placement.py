"""Host selection. Pure: no Kafka.

Small steps chained together in Nomad's style: feasibility checks (capacity, maintenance state,
label constraints) filter hosts, a ranking orders them (first fit for now), and a gang is placed
only when every one of its tasks finds a host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from peloton.model.resources import ZERO, Resources


@dataclass(slots=True)
class HostView:
    host_id: str
    shard: int
    capacity: Resources
    allocated: Resources = ZERO  # as the host manager last reported it
    labels: dict[str, str] = field(default_factory=dict)
    state: str = "UP"
    # Placements made here that the host manager has not reported yet: id -> (expiry, resources).
    pending: dict[str, tuple[float, Resources]] = field(default_factory=dict)

    def free(self, now: float) -> Resources:
        used = self.allocated
        expired = []
        for pid, (expiry, r) in self.pending.items():
            if expiry <= now:
                expired.append(pid)
            else:
                used = used + r
        for pid in expired:  # the host manager's reports must have covered it by now
            del self.pending[pid]
        return self.capacity - used


# Peloton's enums arrive as ints or as names in job files.
_KIND = {1: "TASK", 2: "HOST", "TASK": "TASK", "HOST": "HOST",
         "LABEL_CONSTRAINT_KIND_TASK": "TASK", "LABEL_CONSTRAINT_KIND_HOST": "HOST"}
_CONDITION = {1: "LESS_THAN", 2: "EQUAL", 3: "GREATER_THAN", "LESS_THAN": "LESS_THAN", "EQUAL": "EQUAL",
              "GREATER_THAN": "GREATER_THAN", "CONDITION_LESS_THAN": "LESS_THAN",
              "CONDITION_EQUAL": "EQUAL", "CONDITION_GREATER_THAN": "GREATER_THAN"}
_TYPE = {1: "LABEL", 2: "AND", 3: "OR", "LABEL_CONSTRAINT": "LABEL", "AND_CONSTRAINT": "AND",
         "OR_CONSTRAINT": "OR", "LABEL": "LABEL", "AND": "AND", "OR": "OR"}


def satisfies(constraint: dict | None, host: HostView, task_labels_on_host: list[dict[str, str]]) -> bool:
    """Evaluate a Peloton constraint (LABEL / AND / OR) against a host.

    HOST label constraints count the host's own labels; TASK label constraints count the labels of
    tasks this placement round already put on the host."""
    if not constraint:
        return True
    kind = _TYPE.get(constraint.get("type"), "LABEL" if "labelconstraint" in constraint else None)
    if kind == "AND":
        return all(satisfies(c, host, task_labels_on_host) for c in (constraint.get("andconstraint") or {}).get("constraints") or [])
    if kind == "OR":
        return any(satisfies(c, host, task_labels_on_host) for c in (constraint.get("orconstraint") or {}).get("constraints") or [])
    lc = constraint.get("labelconstraint") or {}
    label = lc.get("label") or {}
    key, value = str(label.get("key", "")), str(label.get("value", ""))
    if _KIND.get(lc.get("kind")) == "TASK":
        count = sum(1 for labels in task_labels_on_host if labels.get(key) == value)
    else:
        count = 1 if host.labels.get(key) == value else 0
    requirement = int(lc.get("requirement") or 0)
    condition = _CONDITION.get(lc.get("condition"), "EQUAL")
    if condition == "LESS_THAN":
        return count < requirement
    if condition == "GREATER_THAN":
        return count > requirement
    return count == requirement


@dataclass(slots=True)
class TaskNeed:
    task_id: str
    resources: Resources
    constraint: dict | None
    labels: dict[str, str]

    @staticmethod
    def from_spec(spec: dict) -> TaskNeed:
        c = spec.get("constraint_json")
        return TaskNeed(spec["task_id"], Resources.from_record(spec["resources"]), json.loads(c) if c else None,
                        spec.get("labels") or {})


def place_gang(needs: list[TaskNeed], hosts: list[HostView], now: float) -> dict[str, HostView] | None:
    """First fit, all or nothing: task id -> host for every task, or None if any task finds none.

    Later tasks of the gang see what earlier ones took (a tentative ledger per host)."""
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
            if not satisfies(need.constraint, host, labels_on.get(host.host_id, [])):
                continue
            chosen = host
            break
        if chosen is None:
            return None
        taken[chosen.host_id] = taken.get(chosen.host_id, ZERO) + need.resources
        labels_on.setdefault(chosen.host_id, []).append(need.labels)
        result[need.task_id] = chosen
    return result
