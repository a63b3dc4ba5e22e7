"""Job control commands (STOP, START, DELETE): what each one may touch and what it does to a job's
tasks. Pure: no Kafka, no store. The job manager and `pelotonctl` use the same checks, so a
command the CLI accepts is one the stage acts on, and a raw producer's bad command gets the
same reason in a dead letter."""

from __future__ import annotations

import re

from peloton.model.states import JOB_TERMINAL, TASK_TERMINAL
from peloton.store import JobRow, TaskRow

KINDS = ("CREATE", "STOP", "START", "DELETE")
STOPPED = "STOPPED"  # the reason of a kill a user asked for
ORPHAN = "ORPHAN"  # the reason of a kill of a run that is not its task's current run

_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


class CommandError(ValueError):
    """A command that cannot apply: the message says why."""


def instance_ranges(text: str | None, instance_count: int) -> list[int] | None:
    """'0-3,7' -> [0, 1, 2, 3, 7]; None (every instance) for None or ''. Refuses ranges outside
    the job, backwards ranges and anything that is not a range."""
    if text is None or not text.strip():
        return None
    chosen: set[int] = set()
    for part in text.split(","):
        m = _RANGE.fullmatch(part)
        if m is None:
            raise CommandError(f"instances {text!r}: {part.strip()!r} is not an instance or a range such as 0-3")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
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
    return None


def to_stop(tasks: list[TaskRow], instances: list[int] | None) -> list[TaskRow]:
    """The runs a stop kills: those not ended yet, of the chosen instances."""
    wanted = None if instances is None else set(instances)
    return [t for t in tasks if (wanted is None or t.instance in wanted)
            and t.state not in TASK_TERMINAL and t.state != "KILLING"]


def to_start(tasks: list[TaskRow], instances: list[int] | None) -> list[TaskRow]:
    """The tasks a start runs again: the stopped (KILLED) ones among the chosen instances."""
    wanted = None if instances is None else set(instances)
    return [t for t in tasks if (wanted is None or t.instance in wanted) and t.state == "KILLED"]
