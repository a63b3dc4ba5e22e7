"""Job commands that act on a job already made: STOP, START, RESTART, UPDATE, DELETE and the
steering of updates. commands.py and workflow.py decide; this claims each command once, writes
what they decided and puts its kills and demand in an Outbox. No Kafka."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from peloton.model.daemon import bound_hosts, daemon_spec
from peloton.model.events import task_id_of
from peloton.model.jobspec import JobConfigError, JobSpec
from peloton.model.volumes import kept_home
from peloton.runtime import Record
from peloton.store import JobRow, TaskRow
from stages.admit.commands import (
    STOPPED,
    CommandError,
    changed_instances,
    command_options,
    command_problem,
    daemon_problem,
    instance_ranges,
    to_restart,
    to_start,
    to_stop,
    update_config_problems,
    update_fields,
    update_problems,
)
from stages.admit.expand import expand_job, gang_records
from stages.admit.outbox import Outbox
from stages.admit.owned_tasks import OwnedTasks
from stages.admit.rollouts import Rollouts
from stages.admit.runs import mark_removed, removed_runs
from stages.admit.slas import Slas
from stages.admit.workflow import ACTIONS, RESTART, START, STOP, UPDATE, new_workflow, options_problem
from stages.admit.writes import JobWrites

log = logging.getLogger("peloton.admit")


class JobControl:
    def __init__(self, store: OwnedTasks, writes: JobWrites, rollouts: Rollouts, slas: Slas,
                 parse: Callable[[str], JobSpec]):
        self.store = store
        self.writes = writes
        self.rollouts = rollouts
        self.slas = slas
        self.parse = parse

    def control(self, records: list[Record], now: int, box: Outbox) -> None:
        """STOP, START and DELETE, in the order they came. Each acts once: its command id is
        claimed in the store in the batch's transaction, so a redelivery finds it claimed."""
        fresh = self.store.claim_commands([r.value["command_id"] for r in records],
                                          [r.value["job_id"] for r in records], now)
        jobs = self.store.get_jobs(list({r.value["job_id"] for r in records}))
        for r in records:
            cmd = r.value
            if cmd["command_id"] not in fresh:
                continue  # delivered twice: it acted the first time
            job = jobs.get(cmd["job_id"])
            instances: list[int] | None = None
            problem = command_problem(cmd["kind"], job, cmd["job_id"])
            if problem is None and job is not None and cmd["kind"] != "DELETE":
                try:
                    instances = instance_ranges(cmd["instances"], job.instance_count)
                except CommandError as exc:
                    problem = str(exc)
            if problem is None and cmd["kind"] in (RESTART, UPDATE, START, STOP):
                problem = options_problem(command_options(cmd))
            if problem or job is None:
                self.writes.refuse(r, problem or "", box)
                continue
            problem = self._act(job, cmd, instances, jobs, now, box)
            if problem:
                self.writes.refuse(r, problem, box)

    def _act(self, job: JobRow, cmd: dict, instances: list[int] | None, jobs: dict[str, JobRow], now: int,
             box: Outbox) -> str | None:
        """One command of a job, checked: why it was refused after all, or None."""
        who = cmd["requested_by"] or "a user"
        if cmd["kind"] in ACTIONS:
            return self.rollouts.steer(job, cmd, who, now, box)
        if problem := daemon_problem(cmd["kind"], job, instances):
            return problem
        if cmd["kind"] == "DELETE":
            self.store.delete_job(job.job_id, now)
            jobs.pop(job.job_id, None)
            log.info("job %s deleted", job.job_id)
            return None
        tasks = self.store.tasks_of_job(job.job_id)
        rolling = cmd["kind"] in (START, STOP) and command_options(cmd).batch_size > 0
        if rolling:  # a batch at a time, as a workflow with an id
            chosen = (to_stop if cmd["kind"] == STOP else to_start)(tasks, instances)
            self.rollouts.begin(job, new_workflow(cmd["command_id"], job.job_id, cmd["kind"],
                                                  [t.instance for t in chosen], command_options(cmd),
                                                  job.config_version, job.config_version, who, now), tasks, now, box)
        elif cmd["kind"] == "STOP":
            self.stop(job, tasks, instances, who, now, box)
        elif cmd["kind"] == "START":
            self.writes.start(job, tasks, instances, now, box)
        elif cmd["kind"] == "RESTART":
            targets = [t.instance for t in to_restart(tasks, instances)]
            self.rollouts.begin(job, new_workflow(cmd["command_id"], job.job_id, RESTART, targets,
                                                  command_options(cmd), job.config_version, job.config_version,
                                                  who, now), tasks, now, box)
        else:
            return self.update(job, tasks, cmd, who, now, box)
        return None

    def stop(self, job: JobRow, tasks: list[TaskRow], instances: list[int] | None, who: str, now: int,
             box: Outbox) -> None:
        """Every run not ended yet goes KILLING and is killed wherever it is, through the same
        path as a preemption: a TaskKill on every partition of the placements topic. Its
        TASK_KILLED ends it (and releases its allocation); the job is KILLED when all have ended."""
        victims = to_stop(tasks, instances)
        message = f"stopped by {who}" + (f" (instances {instances[0]}-{instances[-1]})" if instances else "")
        self.writes.kill(victims, STOPPED, message, now, box)
        if instances is None:
            job.state = "KILLING"
            self.rollouts.end(job, f"the job was stopped by {who}", now)  # a stopped job rolls nothing out
        self.writes.settle(job, now)
        log.info("job %s: stopping %d runs", job.job_id, len(victims))

    def update(self, job: JobRow, tasks: list[TaskRow], cmd: dict, who: str, now: int, box: Outbox) -> str | None:
        """A new config version: immutable fields kept, new instances started, instances whose
        config changed replaced in batches (updateConfig.batchSize, or the command's)."""
        if not cmd["config"]:
            return "UPDATE command without a job config"
        try:
            new = self.parse(cmd["config"])
        except JobConfigError as exc:
            return str(exc)
        old = self.parse(job.config_text)
        version, from_file = update_fields(cmd["config"])
        problems = update_problems(old, new, job.pool, job.config_version, version) + update_config_problems(
            cmd["config"])
        if problems:
            return "update refused: " + "; ".join(problems)
        if job.type == "DAEMON":  # its instances stay on their hosts; the new template replaces each, a host at a time
            bound = bound_hosts({t.instance: t.spec for t in tasks})
            hosts = [bound.get(i, "") for i in range(job.instance_count)]
            old, new = daemon_spec(old, hosts), daemon_spec(new, hosts)
            from_file = replace(from_file, batch_size=from_file.batch_size or 1)
        changed = changed_instances(old, new)
        added = _added_tasks(job, new, cmd["config"], tasks, old.instance_count, now)
        old_version = job.config_version
        # Both versions kept: the old one is what a rollback restores.
        self.store.save_job_configs([(job.job_id, old_version, job.config_text, job.updated_ms),
                                     (job.job_id, old_version + 1, cmd["config"], now)])
        job.config_text, job.config_version, job.instance_count = cmd["config"], old_version + 1, new.instance_count
        self.slas.put(job.job_id, new)
        if added:
            self.store.save_tasks(added)
            ready = [t for t in added if t.state == "PENDING"]
            box.later.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, ready, now))
        removed = self.remove(job, tasks, new.instance_count, cmd["command_id"], old.instance_count, now, box)
        tasks = [t for t in tasks if t.instance < new.instance_count]
        targets = [t.instance for t in to_restart(tasks, changed)] if changed else []
        self.rollouts.begin(job, new_workflow(cmd["command_id"], job.job_id, UPDATE, targets,
                                              command_options(cmd, from_file), old_version, job.config_version, who,
                                              now, [t.instance for t in added], removed), tasks, now, box)
        log.info("job %s: config version %d, %d new instances, %d removed, %d to replace", job.job_id,
                 job.config_version, len(added), len(removed), len(targets))
        return None

    def remove(self, job: JobRow, tasks: list[TaskRow], count: int, update_id: str, old_count: int, now: int,
               box: Outbox) -> list[int]:
        """A shrink's extra instances (count and up) are stopped, highest first; each ends DELETED
        (runs.mark_removed)."""
        extra = removed_runs(tasks, count)
        if not extra:
            return []
        why = f"removed by update {update_id} (instanceCount {old_count} -> {count})"
        ended, events = mark_removed(extra, why, now)
        if ended:
            self.store.update_task_runs(ended, same_run=True)
            self.writes.record_events(events)
        self.writes.kill(to_stop(extra, None), STOPPED, why, now, box)
        return sorted(t.instance for t in extra)


def _added_tasks(job: JobRow, new: JobSpec, config: str, tasks: list[TaskRow], old_count: int,
                 now: int) -> list[TaskRow]:
    """The tasks an update adds (instances from the old count up), each a first run, or, for an
    instance an earlier shrink removed, the run after its last: its runs go on numbering."""
    _, new_tasks = expand_job(job.job_id, job.pool, new, config, now)
    added = [t for t in new_tasks if t.instance >= old_count]
    before = {t.instance: t for t in tasks}
    for t in added:
        if t.instance in before and t.spec is not None:
            t.run_id = before[t.instance].run_id + 1
            t.task_id = t.gang_id = task_id_of(t.job_id, t.instance, t.run_id)
            t.spec = kept_home(before[t.instance].spec, {**t.spec, "task_id": t.task_id, "run_id": t.run_id})
    return added
