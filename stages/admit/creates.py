"""CREATE commands: which make a job, which repeat one made already and which are refused, and
why. Pure: the store's and the host view's answers come through CreateFacts, asked only when a
command gets that far; the caller writes the jobs and refuses the commands."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from peloton.model.constraint import Constraint
from peloton.model.daemon import daemon_spec
from peloton.model.jobspec import JobConfigError, JobSpec
from peloton.model.resources import Resources
from peloton.runtime import Record
from peloton.store import JobRow, TaskRow
from stages.admit.checks import deleted_id_problem, fit_problems, job_id_problem
from stages.admit.expand import expand_job


class CreateFacts(Protocol):
    def applied(self, command_id: str) -> bool:
        """Whether the command was applied once already."""

    def created_with(self, job: JobRow) -> str | None:
        """The config a job was created with."""

    def leaf_pool(self, path: str) -> tuple[dict | None, str | None]:
        """A pool's config, and why a job cannot go there (None: it can)."""

    def daemon_hosts(self, constraint: Constraint | None) -> list[str]:
        """The hosts a new DAEMON job with this constraint starts on (peloton.model.daemon)."""
        ...

    def host_capacities(self) -> list[Resources]:
        """The distinct capacities of the cluster's hosts."""

    def parse(self, text: str) -> JobSpec:
        """A job config, checked against the settings' limits (JobConfigError: why not)."""

    def size_problems(self, spec: JobSpec, job: JobRow, tasks: list[TaskRow]) -> list[str]:
        """Why the job's records would be too large to send."""


@dataclass(slots=True)
class CreatePlan:
    refused: list[tuple[Record, str]] = field(default_factory=list)  # in the order the commands came
    jobs: list[JobRow] = field(default_factory=list)  # to make
    tasks: list[TaskRow] = field(default_factory=list)  # their tasks
    specs: dict[str, JobSpec] = field(default_factory=dict)  # job id -> its parsed config
    repeats: set[str] = field(default_factory=set)  # job ids of creates of a job made already


def plan_creates(records: list[Record], known: dict[str, JobRow], gone: dict[str, int],
                 facts: CreateFacts, now: int) -> CreatePlan:
    """`known`: the jobs the commands name that exist; `gone`: those deleted (id -> when)."""
    plan = CreatePlan()
    seen: set[str] = set()
    leaves: dict[str, tuple[dict | None, str | None]] = {}  # pool -> facts.leaf_pool's answer
    hosts: list[Resources] | None = None
    for r in records:
        cmd = r.value
        problem = _id_problem(cmd, known, gone, facts, plan)
        if problem:
            plan.refused.append((r, problem))
            continue
        if cmd["job_id"] in gone or cmd["job_id"] in known or cmd["job_id"] in seen:
            continue  # a repeat: nothing to make
        if cmd["pool"] not in leaves:
            leaves[cmd["pool"]] = facts.leaf_pool(cmd["pool"])
        pool_config, problem = leaves[cmd["pool"]]
        if problem or pool_config is None:  # a leaf pool has a config
            plan.refused.append((r, problem or f"resource pool {cmd['pool']!r} has no config"))
            continue
        try:
            spec = facts.parse(cmd["config"])
        except JobConfigError as exc:
            plan.refused.append((r, str(exc)))
            continue
        if hosts is None:
            hosts = facts.host_capacities()
        if spec.type == "DAEMON":  # one instance per eligible host, each bound to it
            spec = daemon_spec(spec, facts.daemon_hosts(spec.tasks[0].constraint))
        job, job_tasks = expand_job(cmd["job_id"], cmd["pool"], spec, cmd["config"], now)
        problems = fit_problems(spec, cmd["pool"], pool_config, hosts) or facts.size_problems(spec, job, job_tasks)
        if problems:
            plan.refused.append((r, "job refused: " + "; ".join(problems)))
            continue
        seen.add(job.job_id)
        plan.jobs.append(job)
        plan.tasks.extend(job_tasks)
        plan.specs[job.job_id] = spec
    return plan


def _id_problem(cmd: dict, known: dict[str, JobRow], gone: dict[str, int], facts: CreateFacts,
                plan: CreatePlan) -> str | None:
    """Why a create cannot make its job under its id, or None; a repeat of a create of a job that
    exists goes into plan.repeats (applied again, its config not judged again)."""
    if not cmd["config"]:
        return "CREATE command without a job config"
    problem = job_id_problem(cmd["job_id"])
    if problem:
        return problem
    if cmd["job_id"] in gone:
        # The deleted job's own CREATE, read again, was applied once: it has nothing to do.
        return None if facts.applied(cmd["command_id"]) else deleted_id_problem(cmd["job_id"], gone[cmd["job_id"]])
    if cmd["job_id"] in known:
        job = known[cmd["job_id"]]
        if (cmd["pool"], cmd["config"]) != (job.pool, facts.created_with(job)):
            # Another job under an id taken (two creates with one chosen id raced past the
            # sender's check): refused, where a repeat of the same create is applied.
            return f"job {cmd['job_id']} exists already with another config or pool: a job id names one job"
        plan.repeats.add(cmd["job_id"])
    return None
