"""Will this job ever run? Checks made when a job is created, by the job manager and by
`pelotonctl job create` alike, so both give the same answer. Pure: no Kafka, no store.

A job that passes the config rules can still be impossible: a gang larger than its pool's limit
is never admitted, nor a non-preemptible gang larger than its pool's reservation, nor a
controller task beyond the pool's controller limit; a task larger than every host is never
placed, and a gang whose record is larger than the broker accepts can never be sent. Each would
wait for ever at the head of its queue, so it is refused at create, with the numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

from peloton.model.jobspec import JobSpec, gang_instances
from peloton.model.pool import controller_limit, pool_limit, pool_resources
from peloton.model.resources import Resources
from peloton.serde import SchemaRegistry
from peloton.store import CLAIMS_KEPT_MS, JobRow, TaskRow
from stages.admit.expand import gang_records

# Room left in a gang's record for what placement adds (see size_problems).
WRAPPING_BYTES = 1024
PER_TASK_BYTES = 128

_KINDS = (("cpu", "cpu"), ("mem_mb", "memory MB"), ("disk_mb", "disk MB"), ("gpu", "gpu"))


def _short(need: Resources, have: Resources) -> str:
    return ", ".join(f"{name} {getattr(need, kind):g} > {getattr(have, kind):g}"
                     for kind, name in _KINDS if getattr(need, kind) > getattr(have, kind) + 0.0009)


def _amounts(r: Resources) -> str:
    return ", ".join(f"{name} {getattr(r, kind):g}" for kind, name in _KINDS)


def _instances(ids: list[int]) -> str:
    return f"instance {ids[0]}" if len(ids) == 1 else f"instances {ids[0]}-{ids[-1]}"


def distinct_capacities(host_states: Iterable[dict]) -> list[Resources]:
    """The distinct capacities among HostState records: all fit_problems needs of the hosts."""
    return list({Resources.from_record(h["capacity"]) for h in host_states})


def fit_problems(spec: JobSpec, pool: str, pool_config: dict, hosts: list[Resources]) -> list[str]:
    """Gangs larger than the pool's limit (or, non-preemptible, its reservation); a controller
    task beyond the controller limit; tasks larger than every host (when hosts are known)."""
    problems = []
    limit = pool_limit(pool_config)
    reservation = pool_resources(pool_config, "reservation")
    asked: set[Resources] = set()  # gangs of one task: each distinct need is checked once
    for instances in gang_instances(spec):
        if len(instances) == 1:
            need = spec.tasks[instances[0]].resources
            if need in asked:
                continue
            asked.add(need)
        else:
            need = Resources()
            for i in instances:
                need = need + spec.tasks[i].resources
        if not need.fits_in(limit):
            problems.append(f"{_instances(instances)} (one gang) need more than pool {pool}'s limit: "
                            f"{_short(need, limit)}")
            break  # the first gang is the largest one; the rest are one task each
        if not spec.preemptible and not spec.revocable and not need.fits_in(reservation):
            problems.append(f"{_instances(instances)} {'(one gang) ' if len(instances) > 1 else ''}need more than "
                            f"pool {pool}'s reservation, and non-preemptible tasks run only within it: "
                            f"{_short(need, reservation)} (set sla.preemptible: true to borrow beyond it)")
            break
    controllers = controller_limit(pool_config)
    for task in spec.tasks:
        if task.controller and not task.resources.fits_in(controllers):
            problems.append(f"instance {task.instance} is a controller task and needs more than pool {pool}'s "
                            f"controller limit ({pool_config.get('controller_limit_pct', 100.0):g}% of its "
                            f"reservation): {_short(task.resources, controllers)}")
    if hosts:
        seen: set[Resources] = set()
        for task in spec.tasks:
            if task.resources in seen:
                continue
            seen.add(task.resources)
            if not any(task.resources.fits_in(h) for h in hosts):
                biggest = max(hosts, key=lambda h: (h.cpu, h.mem_mb, h.disk_mb, h.gpu))
                problems.append(f"instance {task.instance} fits on no host: it needs {_amounts(task.resources)}; "
                                f"the largest host has {_amounts(biggest)}")
    return problems


def size_problems(spec: JobSpec, job: JobRow, tasks: list[TaskRow], serde: SchemaRegistry,
                  max_bytes: int) -> list[str]:
    """Gangs whose GangDemand record would be larger than the broker's message limit.

    Encodes the first gang (the only one that may hold many tasks) and one single-task gang per
    distinct task config: instances without an override share their config objects."""
    by_instance = {t.instance: t for t in tasks}
    candidates = [gang_instances(spec)[0]]
    seen: set[tuple[int, int, int]] = set()
    for t in spec.tasks:
        key = (id(t.command), id(t.labels), id(t.constraint))
        if key not in seen:
            seen.add(key)
            candidates.append([t.instance])
    for instances in candidates:
        gang = gang_records(job, [by_instance[i] for i in instances], job.created_ms)[0]
        # Later stages wrap the gang: AdmittedGang adds a timestamp, a Placement a host id per task.
        size = len(serde.encode("peloton.GangDemand", gang)) + WRAPPING_BYTES + PER_TASK_BYTES * len(instances)
        if size > max_bytes:
            return [f"{_instances(instances)} make a gang record of about {size:,} bytes, more than the broker's "
                    f"message limit of {max_bytes:,} bytes, PELOTON_MAX_MESSAGE_BYTES (shorten the command and "
                    f"environment, or make the gang smaller)"]
    return []


_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def job_id_problem(job_id: str) -> str | None:
    """Job ids name task ids, sandbox directories and log files: plain names only."""
    if _JOB_ID.fullmatch(job_id):
        return None
    shown = job_id if len(job_id) <= 60 else job_id[:57] + "..."
    return (f"job id {shown!r} must be 1-128 letters, digits or . _ : - (starting with a letter or digit), "
            f"such as a UUID")


def deleted_id_problem(job_id: str, deleted_ms: int) -> str:
    """A job id deleted lately is not taken again: its runs' ids (job-instance-run) are still
    claims in the stages (a launch, a released allocation), so a new job's runs would look like
    the old job's and never run."""
    def when(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")

    return (f"job {job_id} was deleted at {when(deleted_ms)}; its id can be used again from about "
            f"{when(deleted_ms + CLAIMS_KEPT_MS)}, when the stages have forgotten its runs (choose another id)")
