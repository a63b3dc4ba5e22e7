"""Job control commands (STOP, START, RESTART, UPDATE, DELETE, and the steering of an update):
what each one may touch and what it does to a job's
tasks. Pure: no Kafka, no store. The job manager and `pelotonctl` use the same checks, so a
command the CLI accepts is one the stage acts on, and a raw producer's bad command gets the
same reason in a dead letter."""

from __future__ import annotations

import re
from dataclasses import fields
from operator import attrgetter
from typing import Any

from peloton.model.jobspec import JobSpec, TaskSpec
from peloton.model.states import JOB_TERMINAL, TASK_TERMINAL
from peloton.store import JobRow, TaskRow
from stages.admit.lifecycle import STOPPED
from stages.admit.workflow import ACTIONS, UpdateOptions

KINDS = ("CREATE", "STOP", "START", "RESTART", "UPDATE", "DELETE", *ACTIONS)
REMOVED = "REMOVED"  # the reason an instance a shrinking update took away ends DELETED
ORPHAN = "ORPHAN"  # the reason of a kill of a run that is not its task's current run

_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")
# Peloton's form: from:to, half-open, either end left out (":" is every instance).
_HALF_OPEN = re.compile(r"\s*(\d*)\s*:\s*(\d*)\s*")


class CommandError(ValueError):
    """A command that cannot apply: the message says why."""


def instance_ranges(text: str | None, instance_count: int) -> list[int] | None:
    """'0-3,7' -> [0, 1, 2, 3, 7]; None (every instance) for None or ''. Peloton's half-open
    from:to ranges are read too ('0:4' is 0-3, '5:' from 5 on, ':' every instance). Refuses ranges
    outside the job, backwards or empty ranges and anything that is not a range."""
    if text is None or not text.strip():
        return None
    chosen: set[int] = set()
    for part in text.split(","):
        m, half_open = _RANGE.fullmatch(part), _HALF_OPEN.fullmatch(part)
        if half_open is not None:
            first = int(half_open.group(1) or 0)
            stop = int(half_open.group(2)) if half_open.group(2) else max(instance_count, first + 1)
            if stop <= first:
                raise CommandError(f"instances {text!r}: {part.strip()} holds no instance (from:to takes from, "
                                   "not to)")
            last = stop - 1
        elif m is not None:
            first = int(m.group(1))
            last = int(m.group(2)) if m.group(2) is not None else first
        else:
            raise CommandError(f"instances {text!r}: {part.strip()!r} is not an instance or a range such as 0-3 "
                               "(or Peloton's 0:4)")
        if last < first:
            raise CommandError(f"instances {text!r}: range {first}-{last} runs backwards")
        if last >= instance_count:
            raise CommandError(f"instances {text!r}: the job has instances 0-{instance_count - 1}")
        chosen.update(range(first, last + 1))
    return sorted(chosen)


def command_problem(kind: str, job: JobRow | None, job_id: str) -> str | None:
    """Why a control command cannot apply to this job at all, or None."""
    if kind not in KINDS:
        return f"unknown job command kind {kind!r} (known: {', '.join(KINDS)})"
    if job is None:
        return f"no job {job_id!r}"
    if kind == "DELETE" and job.state not in JOB_TERMINAL:
        return f"job {job_id} is {job.state}: only a terminal job is deleted (stop it first)"
    if kind == "STOP" and job.state in JOB_TERMINAL:
        return f"job {job_id} is {job.state} already: nothing to stop"
    if kind in ACTIONS:
        return None  # the update it names says whether it can (workflow.steer)
    if kind == "START" and job.state in JOB_TERMINAL and job.type == "BATCH":
        # Peloton's rule: a batch job that ended stays ended (a service may be started again)
        return (f"job {job_id} is {job.state}: the tasks of a terminated batch job are not started again "
                "(create the job again)")
    if kind in ("RESTART", "UPDATE") and job.state in JOB_TERMINAL:
        hint = "start stopped instances instead" if job.type == "SERVICE" else "create the job again"
        return f"job {job_id} is {job.state}: a terminal job is not {kind.lower()}d ({hint})"
    return None


def daemon_problem(kind: str, job: JobRow, instances: list[int] | None) -> str | None:
    """A DAEMON job is stopped whole: an instance stopped alone would only start again on its host."""
    if job.type == "DAEMON" and kind == "STOP" and instances is not None:
        return ("a DAEMON job runs on every eligible host: stop the whole job, or keep a host out by the job's "
                "constraint or by maintenance")
    return None


def to_stop(tasks: list[TaskRow], instances: list[int] | None) -> list[TaskRow]:
    """The runs a stop kills: those not ended yet, of the chosen instances. A run being killed for
    another reason (a restart, a preemption) is stopped too, or it would run again after."""
    wanted = None if instances is None else set(instances)
    return [t for t in tasks if (wanted is None or t.instance in wanted)
            and t.state not in TASK_TERMINAL and not (t.state == "KILLING" and t.reason == STOPPED)]


def to_start(tasks: list[TaskRow], instances: list[int] | None) -> list[TaskRow]:
    """The tasks a start runs again: the stopped (KILLED) ones among the chosen instances."""
    wanted = None if instances is None else set(instances)
    return [t for t in tasks if (wanted is None or t.instance in wanted) and t.state == "KILLED"]


def to_restart(tasks: list[TaskRow], instances: list[int] | None) -> list[TaskRow]:
    """The runs a restart replaces: those not ended (nor being stopped) among the chosen instances."""
    return to_stop(tasks, instances)


# What of a task's merged config a change of needs a new run: all of it but its instance (the
# image, the health check and the name too), as Peloton replaces an instance whose config changed.
_task_config = attrgetter(*[f.name for f in fields(TaskSpec) if f.name != "instance"])


def update_problems(old: JobSpec, new: JobSpec, pool: str, stored_version: int, given_version: int | None) -> list[str]:
    """Why a new config cannot replace the stored one: Peloton's immutable fields (name, type,
    labels, pool), a stale changeLog version. (defaultConfig may change here, unlike Peloton's: a
    changed task config rolls out by restart; the instance count may grow or shrink.)"""
    problems = []
    if given_version is not None and given_version != stored_version:
        problems.append(f"changelog.version: {given_version} is not the job's current version {stored_version} "
                        "(someone changed the job since you read it)")
    for field in ("name", "type"):
        if getattr(old, field) != getattr(new, field):
            problems.append(f"{field}: cannot change ({getattr(old, field)!r} -> {getattr(new, field)!r})")
    if old.labels != new.labels:
        problems.append(f"labels: cannot change ({dict(old.labels)} -> {dict(new.labels)})")
    if new.respool and new.respool != pool:
        problems.append(f"respoolid: a job does not move between pools ({pool} -> {new.respool})")
    return problems


def changed_instances(old: JobSpec, new: JobSpec) -> list[int]:
    """Instances (of both counts) whose task config the new spec changes."""
    kept = min(old.instance_count, new.instance_count)
    return [i for i in range(kept) if _task_config(old.tasks[i]) != _task_config(new.tasks[i])]


def replace_diff(old: JobSpec, new: JobSpec) -> dict[str, list[int]]:
    """What an update from `old` to `new` does to each instance: adds, removes, replaces (its task
    config changes) and leaves alone (Peloton's GetReplaceJobDiff)."""
    updated = changed_instances(old, new)
    kept = range(min(old.instance_count, new.instance_count))
    return {"instances_added": list(range(old.instance_count, new.instance_count)),
            "instances_removed": list(range(new.instance_count, old.instance_count)),
            "instances_updated": updated, "instances_unchanged": [i for i in kept if i not in updated]}


def update_fields(text: str) -> tuple[int | None, UpdateOptions]:
    """changeLog.version and updateConfig (Peloton v0: batchSize, maxInstanceAttempts,
    maxFailureInstances, rollbackOnFailure, startPaused) of a job file, either key case, if given."""
    from peloton.model.safe_yaml import YamlError, read_yaml

    try:
        doc = read_yaml(text)
    except YamlError:
        return None, UpdateOptions()

    def field(mapping: object, key: str) -> Any:
        if not isinstance(mapping, dict):
            return None
        return next((v for k, v in mapping.items() if isinstance(k, str) and k.lower() == key), None)

    def count(value: object) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    version = field(field(doc, "changelog"), "version")
    spec = field(doc, "updateconfig")
    return (version if isinstance(version, int) and not isinstance(version, bool) else None,
            UpdateOptions(batch_size=count(field(spec, "batchsize")),
                          max_instance_retries=count(field(spec, "maxinstanceattempts")),
                          max_failure_instances=count(field(spec, "maxfailureinstances")),
                          rollback_on_failure=field(spec, "rollbackonfailure") is True,
                          start_paused=field(spec, "startpaused") is True,
                          in_place=field(spec, "inplace") is True))


# Peloton's updateConfig fields no update here runs as asked: set, in a job file or in the v0 API's
# CreateUpdate, each is refused with these words (v1alpha's start_pods is refused alike).
UNSUPPORTED_UPDATE_FIELDS = {
    "batchpercentage": "batchPercentage is not supported here: give batchSize (instances replaced at a time)",
    "stopbeforeupdate": "stopBeforeUpdate is not supported here: an update replaces each instance's run in its "
                        "batch",
    "starttasks": "startTasks is not supported here: a stopped instance stays stopped through an update and runs "
                  "the new config once started (job start)",
}


def update_config_problems(text: str) -> list[str]:
    """The updateConfig fields of a job file that no update here runs as asked, each
    'updateconfig.key: why' (a file that is no YAML mapping has none)."""
    from peloton.model.safe_yaml import YamlError, read_yaml

    try:
        doc = read_yaml(text)
    except YamlError:
        return []
    if not isinstance(doc, dict):
        return []
    spec = next((v for k, v in doc.items() if isinstance(k, str) and k.lower() == "updateconfig"), None)
    if not isinstance(spec, dict):
        return []
    given = {k.lower(): v for k, v in spec.items() if isinstance(k, str)}
    return [f"updateconfig.{key}: {why}" for key, why in UNSUPPORTED_UPDATE_FIELDS.items() if given.get(key)]


def command_options(cmd: dict, from_file: UpdateOptions | None = None) -> UpdateOptions:
    """A RESTART's or UPDATE's options: the command's, where it sets them, else the job file's."""
    base = from_file or UpdateOptions()
    return UpdateOptions(batch_size=cmd.get("batch_size") or base.batch_size,
                         max_instance_retries=cmd.get("max_instance_retries") or base.max_instance_retries,
                         max_failure_instances=cmd.get("max_failure_instances") or base.max_failure_instances,
                         rollback_on_failure=bool(cmd.get("rollback_on_failure")) or base.rollback_on_failure,
                         start_paused=bool(cmd.get("start_paused")) or base.start_paused,
                         in_place=bool(cmd.get("in_place")) or base.in_place)
