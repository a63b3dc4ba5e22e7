"""The job manager's part of DAEMON jobs: their instances kept on every eligible host as hosts
join, leave and come back (peloton.model.daemon decides; this applies). Each admit instance
looks after the daemon jobs whose status partition it owns, between batches."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from peloton.model.daemon import bound_hosts, daemon_spec, reconcile
from peloton.model.jobspec import JobSpec
from peloton.store import JobRow
from stages.admit.commands import STOPPED, to_stop
from stages.admit.expand import expand_job, gang_records
from stages.admit.outbox import Outbox
from stages.admit.owned_tasks import OwnedTasks
from stages.admit.writes import JobWrites

log = logging.getLogger("peloton.admit")

DAEMON = "DAEMON"


class Daemons:
    def __init__(self, store: OwnedTasks, writes: JobWrites, parse: Callable[[str], JobSpec]):
        self.store, self.writes, self.parse = store, writes, parse
        self._specs: dict[tuple[str, int], JobSpec] = {}  # (job, config version) -> its config parsed

    def spec(self, job: JobRow) -> JobSpec:
        key = (job.job_id, job.config_version)
        if key not in self._specs:
            self._specs = {k: v for k, v in self._specs.items() if k[0] != job.job_id}
            self._specs[key] = self.parse(job.config_text)
        return self._specs[key]

    def keep(self, jobs: list[JobRow], hosts: Mapping[str, Mapping[str, Any]], now: int, box: Outbox) -> None:
        """Each daemon job's instances brought in line with the hosts (host id -> host-state)."""
        for job in jobs:
            spec = self.spec(job)
            tasks = self.store.tasks_of_job(job.job_id)
            bound = bound_hosts({t.instance: t.spec for t in tasks})
            if len(bound) != job.instance_count:
                log.warning("daemon job %s: %d of its %d instances are bound to a host; left as it is", job.job_id,
                            len(bound), job.instance_count)
                continue
            plan = reconcile(spec.tasks[0].constraint, bound, {t.instance: t.state for t in tasks}, hosts,
                             spec.max_unavailable_instances)
            if plan.add:
                self._add(job, spec, [bound[i] for i in range(job.instance_count)] + plan.add, now, box)
            for instance in plan.stop:
                host = bound[instance]
                state = (hosts.get(host) or {}).get("state", "gone")
                self.writes.kill(to_stop([t for t in tasks if t.instance == instance], None), STOPPED,
                                 f"its host {host} left ({state}): a daemon runs on eligible hosts only", now, box)
                log.info("daemon job %s: instance %d stopped, its host %s is %s", job.job_id, instance, host, state)
            if plan.start:
                self.writes.start(job, tasks, plan.start, now, box)
                log.info("daemon job %s: instances %s started again, their hosts are back", job.job_id, plan.start)
            if plan.stop:
                self.writes.settle(job, now)

    def _add(self, job: JobRow, spec: JobSpec, hosts: list[str], now: int, box: Outbox) -> None:
        """New instances for the hosts past the job's count, each a first run bound to its host."""
        old = job.instance_count
        _, every = expand_job(job.job_id, job.pool, daemon_spec(spec, hosts), job.config_text, now)
        added = [t for t in every if t.instance >= old]
        self.store.save_tasks(added)
        job.instance_count = len(hosts)
        self.writes.settle(job, now)
        box.later.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, added, now))
        log.info("daemon job %s: %d new instances for hosts %s", job.job_id, len(added), ", ".join(hosts[old:]))
