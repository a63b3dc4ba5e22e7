"""DAEMON jobs: one instance on every eligible host, as Nomad's system jobs. Pure.

A daemon job's instance is bound to one host for good: its task config is the job's template
with a pin on that host (a HOST label constraint hostname = the host, ANDed with the job's own
constraint), so placement puts it nowhere else, and the binding is read back from the tasks'
launch specs (bound_hosts). A host is eligible while it is UP and its labels satisfy the job's
constraint (HOST label constraints; TASK ones are placement's to check). The reconciler
(reconcile) compares the bindings with the hosts: a new eligible host gets a new instance, an
instance whose host left (DOWN, in maintenance, gone, or no longer matching) is stopped, within
the job's disruption budget where the host is drained, and a stopped one whose host is eligible
again starts. Peloton's job manager refused DAEMON jobs; this follows Nomad."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from peloton.model.constraint import AndConstraint, Constraint, LabelConstraint, constraint_from_json, evaluate
from peloton.model.jobspec import JobSpec, TaskSpec, instances_of
from peloton.model.states import TASK_TERMINAL

HOST_KEY = "hostname"  # every host's label of its own id (stages/launch/hosts.py)
# The ended state after which a daemon's instance is started again when its host is eligible.
_STOPPED = ("KILLED",)


def pin(host_id: str) -> LabelConstraint:
    return LabelConstraint("HOST", "EQUAL", HOST_KEY, host_id, 1)


def pinned(job_constraint: Constraint | None, host_id: str) -> Constraint:
    """The job's constraint with the pin on host_id as its last term."""
    if job_constraint is None:
        return pin(host_id)
    return AndConstraint((job_constraint, pin(host_id)))


def host_of(constraint: Constraint | None) -> str | None:
    """The host a pinned constraint (pinned()) binds to; None for one that is not pinned."""
    last = constraint.children[-1] if isinstance(constraint, AndConstraint) and constraint.children else constraint
    if isinstance(last, LabelConstraint) and (last.kind, last.condition, last.key, last.requirement) == \
            ("HOST", "EQUAL", HOST_KEY, 1):
        return last.value
    return None


def bound_hosts(launch_specs: Mapping[int, dict[str, Any] | None]) -> dict[int, str]:
    """Instance -> host, from the tasks' launch specs (their constraint_json)."""
    return {i: h for i, spec in launch_specs.items() if (h := bound_host(spec)) is not None}


def daemon_spec(spec: JobSpec, hosts: Sequence[str]) -> JobSpec:
    """The job as its instances run: the template (the config's default, instance 0) once per
    host, in order, each pinned to its host."""
    tasks = tuple(daemon_task(spec, i, host) for i, host in enumerate(hosts))
    return replace(spec, instance_count=len(hosts), tasks=tasks)


def daemon_task(spec: JobSpec, instance: int, host: str) -> TaskSpec:
    """Instance `instance` of the daemon, bound to `host`: the template, pinned."""
    template = spec.tasks[0]
    [task] = instances_of(template, [instance])
    return replace(task, constraint=pinned(template.constraint, host))


def bound_host(launch_spec: Mapping[str, Any] | None) -> str | None:
    """The host a daemon's run is bound to, from its launch spec."""
    text = (launch_spec or {}).get("constraint_json")
    return host_of(constraint_from_json(text)) if text else None


def eligible(record: Mapping[str, Any], constraint: Constraint | None) -> bool:
    """A host-state record's host can hold the daemon: UP, its labels match the constraint."""
    if record.get("state") != "UP":
        return False
    return evaluate(constraint, record.get("labels") or {HOST_KEY: record.get("host_id", "")}, {})


@dataclass
class DaemonPlan:
    add: list[str] = field(default_factory=list)  # hosts that get a new instance, in order
    stop: list[int] = field(default_factory=list)  # instances whose host left
    start: list[int] = field(default_factory=list)  # stopped instances whose host is back
    waiting: dict[str, str] = field(default_factory=dict)  # host -> why its instance is not running


def reconcile(constraint: Constraint | None, bound: Mapping[int, str], states: Mapping[int, str],
              hosts: Mapping[str, Mapping[str, Any]], budget: int) -> DaemonPlan:
    """What to do so that every eligible host runs the daemon: `bound` instance -> host, `states`
    instance -> its task's state, `hosts` host id -> host-state record, `budget` the job's
    maximumUnavailableInstances (0: none), which bounds the instances stopped on drained hosts;
    instances on hosts that are DOWN or gone are down already and are stopped regardless."""
    plan = DaemonPlan()
    ok = {h for h, rec in hosts.items() if eligible(rec, constraint)}
    have = set(bound.values())
    plan.add = sorted(ok - have)
    # Down now: being stopped, or on an eligible host and not running (an ended one on a host that
    # left is not counted: the budget is of instances that could run).
    unavailable = sum(1 for i, h in bound.items()
                      if states.get(i) == "KILLING" or (h in ok and states.get(i) != "RUNNING"))
    room = budget - unavailable if budget > 0 else len(bound)
    for instance, host in sorted(bound.items()):
        state = states.get(instance, "")
        if host in ok:
            if state in _STOPPED:
                plan.start.append(instance)
            elif state != "RUNNING":
                plan.waiting[host] = f"instance {instance} is {state or 'not started'}"
            continue
        if state in TASK_TERMINAL or state == "KILLING":
            continue
        record = hosts.get(host)
        if record is not None and record.get("state") in ("DRAINING", "DRAINED"):
            if room <= 0:
                plan.waiting[host] = (f"instance {instance} waits for the job's disruption budget "
                                      f"(maximumUnavailableInstances {budget}) to leave its host in maintenance")
                continue
            room -= 1
        plan.stop.append(instance)
    return plan


def why_not(record: Mapping[str, Any] | None, constraint: Constraint | None) -> str:
    """Why a host holds no running instance of the daemon, in a line."""
    if record is None:
        return "the host is gone from host-state"
    if record.get("state") != "UP":
        return f"the host is {record.get('state')}"
    if not eligible(record, constraint):
        return "the host's labels do not match the job's constraint"
    return "eligible"

