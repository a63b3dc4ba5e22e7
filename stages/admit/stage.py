"""admit stage: job commands and task status events in; task demand and releases out.

Per batch: one store transaction holds every job, task and state change; only after it commits
does anything go out (so a crash replays the batch and finds the store already right).
"""

from __future__ import annotations

import logging
import uuid

from peloton.model.jobconfig import JobConfigError, parse_job_config
from peloton.model.pool import leaf_pool_error
from peloton.model.states import JOB_TERMINAL
from peloton.runtime import Record, Stage, now_ms
from peloton.store import JobRow, StorageGateway, TaskRow
from stages.admit.expand import expand_job, gang_records, next_run
from stages.admit.lifecycle import job_state, task_transition

log = logging.getLogger("peloton.admit")


class AdmitStage(Stage):
    name = "admit"
    inputs = ("job-commands", "task-status")

    def __init__(self, store: StorageGateway):
        self.store = store

    def handle(self, records: list[Record]) -> None:
        commands = [r for r in records if r.topic == "job-commands"]
        statuses = [r for r in records if r.topic == "task-status"]
        out: list[tuple[str, str, str, dict]] = []  # (topic, key, schema, value), sent after commit
        with self.store.transaction():
            if commands:
                self._commands(commands, out)
            if statuses:
                self._statuses(statuses, out)
        for topic, key, schema, value in out:
            self.emit.emit(topic, key, schema, value)

    # -- job commands -----------------------------------------------------------------------
    def _commands(self, records: list[Record], out: list) -> None:
        now = now_ms()
        pools = self.store.list_pools()
        jobs: list[JobRow] = []
        tasks: list[TaskRow] = []
        for r in records:
            cmd = r.value
            if cmd["kind"] != "CREATE":
                self.emit.dead_letter(r, f"unknown job command kind {cmd['kind']!r} (known: CREATE)")
                continue
            if not cmd["config"]:
                self.emit.dead_letter(r, "CREATE command without a job config")
                continue
            problem = leaf_pool_error(pools, cmd["pool"])
            if problem:
                self.emit.dead_letter(r, problem)
                continue
            try:
                spec = parse_job_config(cmd["config"])
            except JobConfigError as exc:
                self.emit.dead_letter(r, str(exc))
                continue
            job, job_tasks = expand_job(cmd["job_id"], cmd["pool"], spec, cmd["config"], now)
            jobs.append(job)
            tasks.extend(job_tasks)
        created = self.store.create_jobs(jobs, tasks)
        for job in jobs:
            if job.job_id in created:
                mine = [t for t in tasks if t.job_id == job.job_id]
                out.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, mine, now))
        # A repeated create (a redelivery after a crash, or a producer retry) must not lose demand
        # that was stored but never sent: send whatever is still PENDING again; entitle dedupes.
        repeats = [j.job_id for j in jobs if j.job_id not in created]
        if repeats:
            stored = self.store.get_jobs(repeats)
            pending = self.store.pending_tasks_of_jobs(repeats)
            for job_id, job in stored.items():
                mine = [t for t in pending if t.job_id == job_id]
                out.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, mine, now))

    # -- task status ------------------------------------------------------------------------
    def _statuses(self, records: list[Record], out: list) -> None:
        now = now_ms()
        keys = list({(r.value["job_id"], r.value["instance"]) for r in records})
        tasks = self.store.tasks_by_instance(keys)
        changed: dict[tuple[str, int], TaskRow] = {}
        reruns: list[TaskRow] = []
        events = []
        for r in records:
            ev = r.value
            task = tasks.get((ev["job_id"], ev["instance"]))
            if task is None:
                log.info("status for unknown task %s ignored", ev["task_id"])
                continue
            move = task_transition(task.state, task.run_id, ev["run_id"], ev["state"], task.failures, task.max_failures)
            if move is None:
                continue
            events.append((ev["task_id"], ev["job_id"], ev["instance"], ev["run_id"], move.state,
                           ev["reason"], ev["exit_code"], ev["timestamp_ms"]))
            if move.release:
                release = {"task_id": task.task_id, "job_id": task.job_id, "pool": task.pool,
                           "reason": ev["state"], "timestamp_ms": now}
                out.append(("task-demand", task.pool, "peloton.TaskRelease", release))
            task.state = move.state
            task.host_id = ev["host_id"] or task.host_id
            task.reason, task.message = ev["reason"], ev["message"]
            task.exit_code, task.signal = ev["exit_code"], ev["signal"]
            task.updated_ms = now
            if move.count_failure:
                task.failures += 1
            if move.retry:
                next_run(task, now)
            if move.retry or move.requeue:
                reruns.append(task)
            changed[(task.job_id, task.instance)] = task
        if not changed:
            return
        self.store.save_tasks(list(changed.values()))
        self.store.record_task_events(events)
        job_ids = list({t.job_id for t in changed.values()})
        jobs = self.store.get_jobs(job_ids)
        counts = self.store.task_state_counts(job_ids)
        updated = []
        for job_id, job in jobs.items():
            state = job_state(counts[job_id], job.instance_count, job.state)
            if state != job.state:
                job.state, job.updated_ms = state, now
                if state in JOB_TERMINAL:
                    job.completed_ms = now
                updated.append(job)
        self.store.update_jobs(updated)
        for task in reruns:
            job = jobs[task.job_id]
            out.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, [task], now))


def new_job_id() -> str:
    return str(uuid.uuid4())
