"""The part of each job's sla the job manager enforces, parsed from its config once and kept
while the job is active. Pure: the caller gives the parser (with its limits)."""

from __future__ import annotations

from collections.abc import Callable

from peloton.model.jobspec import JobConfigError, JobSpec
from peloton.store import JobRow

Sla = tuple[int, int, int]  # (maximumRunningInstances, maxRunningTime in s, maximumUnavailableInstances); 0: unlimited


def sla_of(spec: JobSpec) -> Sla:
    """What the job manager enforces of a job's sla."""
    return spec.max_running_instances, spec.max_running_time_s, spec.max_unavailable_instances


class Slas:
    def __init__(self, parse: Callable[[str], JobSpec]):
        self.parse = parse
        self.known: dict[str, Sla] = {}

    def of(self, job: JobRow) -> Sla:
        """The job's sla; a config that no longer parses enforces nothing."""
        if job.job_id not in self.known:
            try:
                self.known[job.job_id] = sla_of(self.parse(job.config_text))
            except JobConfigError:
                self.known[job.job_id] = (0, 0, 0)
        return self.known[job.job_id]

    def put(self, job_id: str, spec: JobSpec) -> None:
        """A config just parsed: not parsed again."""
        self.known[job_id] = sla_of(spec)

    def forget(self, job_id: str) -> None:
        self.known.pop(job_id, None)

    def keep_only(self, live: set[str]) -> None:
        """Forget the jobs that ended."""
        self.known = {j: v for j, v in self.known.items() if j in live}
