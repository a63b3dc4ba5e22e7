"""Feasibility checks: may this host take this task now? Pure: no Kafka.

Each check looks at one thing (Nomad's feasibility iterators) and returns None when the host
passes, or a short reason when it refuses. The reasons are the keys "why pending" counts hosts
under, so they name what the user can change: "not UP", "cpu", "mem_mb", "disk_mb", "gpu",
"GPU host kept for GPU tasks", "no container runtime", "constraint <the constraint, readably>",
"ports".

A check sees the host as the task being placed sees it: the host's own view (what the host
manager reports plus this instance's placements in flight) and a `Tentative` share, what the
gang's earlier tasks took on that host before the gang as a whole is recorded anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from peloton.model.constraint import AndConstraint, Constraint, LabelConstraint, OrConstraint, evaluate
from peloton.model.resources import EPS, ZERO, Resources
from stages.place.host_view import HostView
from stages.place.task_need import TaskNeed

NOT_UP = "not UP"
GPU_KEPT = "GPU host kept for GPU tasks"
PORTS = "ports"
CONSTRAINT = "constraint "  # followed by the constraint's readable form
NO_RUNTIME = "no container runtime"
RUNTIME_LABEL = "container.runtime"  # set by an agent with an OCI runtime (peloton/host/containers.py)
RESOURCE_KINDS = ("cpu", "mem_mb", "disk_mb", "gpu")  # in the order a short host is reported

_NO_PORTS: frozenset[int] = frozenset()


@dataclass(slots=True)
class Tentative:
    """What the gang's tasks placed so far take on one host (Nomad's proposed allocations). The
    next task of the gang must see it, though nothing is recorded on the host until the whole
    gang has found hosts: a gang that fails leaves every host as it was."""

    resources: Resources = ZERO
    task_labels: dict[tuple[str, str], int] = field(default_factory=dict)
    job_tasks: dict[str, int] = field(default_factory=dict)
    ports: set[int] = field(default_factory=set)

    def take(self, need: TaskNeed, ports: tuple[int, ...]) -> None:
        self.resources = self.resources + need.resources
        for kv in need.labels.items():
            self.task_labels[kv] = self.task_labels.get(kv, 0) + 1
        self.job_tasks[need.job_id] = self.job_tasks.get(need.job_id, 0) + 1
        self.ports.update(ports)


class LabelCounts(Mapping):
    """The host's task label counts plus the gang's own on that host, read without copying
    either (evaluate only calls get)."""

    __slots__ = ("gang", "host")

    def __init__(self, host: Mapping[tuple[str, str], int], gang: Mapping[tuple[str, str], int]):
        self.host = host
        self.gang = gang

    def get(self, key: tuple[str, str], default: Any = 0) -> Any:  # as Mapping.get: the default when none
        return self.host.get(key, 0) + self.gang.get(key, 0) or default

    def __getitem__(self, key: tuple[str, str]) -> int:
        count = self.get(key, 0)
        if not count:
            raise KeyError(key)
        return count

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.host.keys() | self.gang.keys())

    def __len__(self) -> int:
        return len(self.host.keys() | self.gang.keys())


# A check: (task, host, the host's free room net of the gang's share, the gang's share) -> reason.
Check = Callable[["TaskNeed", "HostView", Resources, "Tentative | None"], "str | None"]


def host_is_up(need: TaskNeed, host: HostView, free: Resources, share: Tentative | None) -> str | None:
    """DRAINING, DRAINED and DOWN hosts take no new placements (host maintenance)."""
    return None if host.state == "UP" else NOT_UP


def gpu_hosts_kept_for_gpu_tasks(need: TaskNeed, host: HostView, free: Resources,
                                 share: Tentative | None) -> str | None:
    """GPUs are scarce: a task that asks for none would take the cpu and memory a GPU task needs
    to use the host's GPUs, so it is kept off hosts that have any."""
    return GPU_KEPT if need.resources.gpu <= EPS and host.capacity.gpu > EPS else None


def room_for_resources(need: TaskNeed, host: HostView, free: Resources, share: Tentative | None) -> str | None:
    """The first kind (cpu, mem_mb, disk_mb, gpu) the host has too little of, within EPS."""
    r = need.resources
    if r.cpu > free.cpu + EPS:
        return "cpu"
    if r.mem_mb > free.mem_mb + EPS:
        return "mem_mb"
    if r.disk_mb > free.disk_mb + EPS:
        return "disk_mb"
    if r.gpu > free.gpu + EPS:
        return "gpu"
    return None


def constraint_holds(need: TaskNeed, host: HostView, free: Resources, share: Tentative | None) -> str | None:
    """The task's label constraint, counting every task on the host: those reported, those in
    flight from this instance, and the gang's own placed before this one."""
    c = need.constraint
    if c is None:
        return None
    counts = host.task_labels if share is None or not share.task_labels else LabelCounts(
        host.task_labels, share.task_labels)
    return None if evaluate(c, host.labels, counts) else CONSTRAINT + describe_constraint(c)


def runs_images(need: TaskNeed, host: HostView, free: Resources, share: Tentative | None) -> str | None:
    """A task that names an image goes only where an agent can run it in one, never bare."""
    return NO_RUNTIME if need.image and not host.labels.get(RUNTIME_LABEL) else None


def ports_free(need: TaskNeed, host: HostView, free: Resources, share: Tentative | None) -> str | None:
    """Static ports free and inside one of the host's ranges, and enough free ports in the ranges
    for the dynamic ones."""
    statics, dynamic = need.static_ports, need.dynamic_ports
    if not statics and not dynamic:
        return None
    used, taken, ranges = host.used_ports, share.ports if share is not None else _NO_PORTS, host.port_ranges
    if not statics and len(ranges) == 1 and ranges[0][1] - ranges[0][0] + 1 - len(used) - len(taken) >= dynamic:
        return None  # the usual case, settled without a call: see enough_free_ports
    for port in statics:
        if port in used or port in taken or not in_ranges(port, ranges):
            return PORTS
    if dynamic and not enough_free_ports(ranges, used, taken, dynamic + len(statics)):
        return PORTS
    return None


CHECKS: tuple[Check, ...] = (host_is_up, gpu_hosts_kept_for_gpu_tasks, room_for_resources, runs_images,
                             constraint_holds, ports_free)


def checks_for(need: TaskNeed) -> tuple[Check, ...]:
    """The checks that can refuse this task: one with no constraint or no ports skips those
    (placing runs the checks for every host a task looks at)."""
    return _CHECKS_BY_SHAPE[need.constraint is not None, bool(need.static_ports or need.dynamic_ports),
                            bool(need.image)]


# (has a constraint, asks for ports, names an image) -> the checks that apply, in CHECKS' order
_CHECKS_BY_SHAPE = {
    (constrained, ports, image): tuple(
        check for check in CHECKS
        if (constrained or check is not constraint_holds) and (ports or check is not ports_free)
        and (image or check is not runs_images))
    for constrained in (False, True) for ports in (False, True) for image in (False, True)
}


def refusal(need: TaskNeed, host: HostView, free: Resources, share: Tentative | None = None,
            checks: tuple[Check, ...] = CHECKS) -> str | None:
    """The first reason the host refuses the task, or None when it takes it. Never raises on
    anything a launch spec can hold: constraints are parsed trees, ports plain ints. `checks`:
    checks_for(need), to skip those that cannot refuse it."""
    for check in checks:
        reason = check(need, host, free, share)
        if reason is not None:
            return reason
    return None


# ---------------------------------------------------------------------------------------------
# Ports


def in_ranges(port: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    for low, high in ranges:  # noqa: SIM110 -- placing calls this per host; any() over a generator is slower
        if low <= port <= high:
            return True
    return False


def enough_free_ports(ranges: tuple[tuple[int, int], ...], used: set[int], taken: set[int] | frozenset[int],
                      wanted: int) -> bool:
    """Whether the ranges have `wanted` ports free. The quick count (every used port taken to be
    in range) is never too high and settles the usual case; only when it falls short are the
    used ports inside the ranges counted one by one."""
    size = ranges[0][1] - ranges[0][0] + 1 if len(ranges) == 1 else sum(high - low + 1 for low, high in ranges)
    if size - len(used) - len(taken) >= wanted:
        return True
    in_use = sum(1 for p in used if in_ranges(p, ranges)) + sum(
        1 for p in taken if p not in used and in_ranges(p, ranges))
    return size - in_use >= wanted


def pick_ports(need: TaskNeed, host: HostView, share: Tentative | None) -> tuple[int, ...]:
    """The task's ports on a host that passed ports_free: its static ports in the order given,
    then the lowest free ports of the ranges for the dynamic ones."""
    picked = list(need.static_ports)
    wanted = need.dynamic_ports
    if wanted:
        used, taken = host.used_ports, share.ports if share is not None else _NO_PORTS
        statics = set(need.static_ports)
        for low, high in host.port_ranges:
            port = low
            while port <= high and wanted:
                if port not in used and port not in taken and port not in statics:
                    picked.append(port)
                    wanted -= 1
                port += 1
            if not wanted:
                break
    return tuple(picked)


# ---------------------------------------------------------------------------------------------
# Reasons, readably


_OPS = {"LESS_THAN": "<", "EQUAL": "=", "GREATER_THAN": ">"}


@lru_cache(maxsize=4096)
def describe_constraint(c: Constraint) -> str:
    """A constraint as a user reads it in "why pending": rack=a, rack!=a, no task app=web,
    fewer than 2 tasks app=web, (a or b), (a and b)."""
    if isinstance(c, AndConstraint):
        return "(" + " and ".join(describe_constraint(child) for child in c.children) + ")"
    if isinstance(c, OrConstraint):
        return "(" + " or ".join(describe_constraint(child) for child in c.children) + ")"
    if not isinstance(c, LabelConstraint):
        return "not a constraint"
    label, n = f"{c.key}={c.value}", c.requirement
    if c.kind == "HOST":  # the host's count is 0 or 1: say which one is wanted where it is clear
        has = (c.condition == "EQUAL" and n == 1) or (c.condition == "GREATER_THAN" and n == 0)
        lacks = (c.condition == "EQUAL" and n == 0) or (c.condition == "LESS_THAN" and n == 1)
        if has:
            return label
        if lacks:
            return f"{c.key}!={c.value}"
        return f"host label {label} count {_OPS[c.condition]} {n}"
    if c.condition == "EQUAL":
        return f"no task {label}" if n == 0 else f"exactly {n} task{_s(n)} {label}"
    if c.condition == "LESS_THAN":
        return f"fewer than {n} task{_s(n)} {label}"
    return f"more than {n} task{_s(n)} {label}"


def reason_text(reason: str, need: TaskNeed) -> str:
    """A reason key as "why pending" shows it, with the amount the task asks for."""
    r = need.resources
    if reason == "cpu":
        return f"no slack for {r.cpu:g} revocable cpu" if need.revocable else f"no room for {r.cpu:g} cpu"
    if reason == "mem_mb":
        return f"no room for {r.mem_mb:g} MB of memory"
    if reason == "disk_mb":
        return f"no room for {r.disk_mb:g} MB of disk"
    if reason == "gpu":
        return f"no room for {r.gpu:g} gpu"
    if reason == PORTS:
        asked = [str(p) for p in need.static_ports]
        if need.dynamic_ports:
            asked.append(f"{need.dynamic_ports} dynamic")
        return f"no free ports for {', '.join(asked)}"
    return reason


def _s(n: int) -> str:
    return "" if n == 1 else "s"
