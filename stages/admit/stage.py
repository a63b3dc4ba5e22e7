"""admit stage: job commands and task status events in; task demand and releases out.

Per batch: one store transaction holds every job, task and state change; only after it commits
does anything go out (so a crash replays the batch and finds the store already right).
"""

from __future__ import annotations

import logging
import uuid

from peloton.model.jobconfig import JobConfigError, parse_job_config
from peloton.model.pool import leaf_pool_error
from peloton.model.resources import Resources
from peloton.model.states import JOB_TERMINAL
from peloton.runtime import CompactedView, Record, Stage, now_ms
from peloton.store import JobRow, JobStore, TaskRow
from stages.admit.checks import distinct_capacities, fit_problems, job_id_problem, size_problems
from stages.admit.expand import expand_job, gang_records, next_run, requeued_gang_id
from stages.admit.lifecycle import job_state, status_problem, task_transition

log = logging.getLogger("peloton.admit")


class AdmitStage(Stage):
    name = "admit"
    inputs = ("job-commands", "task-status")

    def __init__(self, store: JobStore, hosts: CompactedView | None = None):
        self.store = store
        self.hosts = hosts  # host-state, for refusing tasks larger than every host

    def bind(self, emitter, settings, catalogue) -> None:
        super().bind(emitter, settings, catalogue)
        if self.hosts is None:
            self.hosts = CompactedView(settings, "host-state", catalogue)

    def handle(self, records: list[Record]) -> None:
        commands = [r for r in records if r.topic == "job-commands"]
        statuses = [r for r in records if r.topic == "task-status"]
        out: list[tuple[str, str, str, dict]] = []  # (topic, key, schema, value)
        # One transaction for the batch, and what it sends is emitted inside it: if anything
        # raises, the store rolls back and the runtime discards the output, so neither is half done.
        with self.store.transaction():
            if commands:
                self._commands(commands, out)
            if statuses:
                self._statuses(statuses, out)
            for topic, key, schema, value in out:
                self.emit.emit(topic, key, schema, value)

    def tick(self, now: float) -> None:
        self.hosts.poll()

    def host_capacities(self) -> list[Resources]:
        self.hosts.poll()
        return distinct_capacities(self.hosts.values.values())

    # -- job commands -----------------------------------------------------------------------
    def _commands(self, records: list[Record], out: list) -> None:
        now = now_ms()
        pools = self.store.list_pools()
        known = self.store.get_jobs([r.value["job_id"] for r in records])
        hosts: list[Resources] | None = None
        jobs: list[JobRow] = []
        tasks: list[TaskRow] = []
        seen: set[str] = set()
        repeats: set[str] = set()
        for r in records:
            cmd = r.value
            if cmd["kind"] != "CREATE":
                self.emit.dead_letter(r, f"unknown job command kind {cmd['kind']!r} (known: CREATE)")
                continue
            if not cmd["config"]:
                self.emit.dead_letter(r, "CREATE command without a job config")
                continue
            problem = job_id_problem(cmd["job_id"])
            if problem:
                self.emit.dead_letter(r, problem)
                continue
            if cmd["job_id"] in known:
                repeats.add(cmd["job_id"])  # handled below, without judging the config again
                continue
            if cmd["job_id"] in seen:
                continue  # created earlier in this batch: a repeat
            problem = leaf_pool_error(pools, cmd["pool"])
            if problem:
                self.emit.dead_letter(r, problem)
                continue
            try:
                spec = parse_job_config(cmd["config"], self.settings.job_limits(), self.settings.yaml_limits())
            except JobConfigError as exc:
                self.emit.dead_letter(r, str(exc))
                continue
            if hosts is None:
                hosts = self.host_capacities()
            job, job_tasks = expand_job(cmd["job_id"], cmd["pool"], spec, cmd["config"], now)
            problems = fit_problems(spec, cmd["pool"], pools[cmd["pool"]], hosts) or size_problems(
                spec, job, job_tasks, self.emit.serde, self.settings.max_message_bytes)
            if problems:
                self.emit.dead_letter(r, "job refused: " + "; ".join(problems))
                continue
            seen.add(job.job_id)
            jobs.append(job)
            tasks.extend(job_tasks)
        created = self.store.create_jobs(jobs, tasks)
        by_job: dict[str, list[TaskRow]] = {}
        for t in tasks:
            by_job.setdefault(t.job_id, []).append(t)
        for job in jobs:
            if job.job_id in created:
                out.extend(("task-demand", job.pool, "peloton.GangDemand", g)
                           for g in gang_records(job, by_job[job.job_id], now))
        # A repeated create (a redelivery after a crash, or a producer retry) must not lose demand
        # that was stored but never sent: send whatever is still PENDING again; entitle dedupes.
        if repeats:
            pending = self.store.pending_tasks_of_jobs(list(repeats))
            for job_id in repeats:
                job = known[job_id]
                mine = [t for t in pending if t.job_id == job_id]
                out.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, mine, now))

    # -- task status ------------------------------------------------------------------------
    def _statuses(self, records: list[Record], out: list) -> None:
        now = now_ms()
        keys = list({(r.value["job_id"], r.value["instance"]) for r in records})
        tasks = self.store.tasks_by_instance(keys)
        changed: dict[tuple[str, int], TaskRow] = {}
        reruns: list[TaskRow] = []
        requeue_batch = uuid.uuid4().hex[:8]
        events = []
        for r in records:
            ev = r.value
            task = tasks.get((ev["job_id"], ev["instance"]))
            problem = status_problem(task is not None, ev)
            if problem:
                self.emit.dead_letter(r, problem)
                continue
            move = task_transition(task.state, task.run_id, ev["run_id"], ev["state"], task.failures, task.max_failures,
                                   ev["reason"])
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
            elif move.requeue:
                task.gang_id = requeued_gang_id(task.gang_id, requeue_batch)
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
        by_job: dict[str, list[TaskRow]] = {}
        for task in reruns:
            by_job.setdefault(task.job_id, []).append(task)
        for job_id, tasks_of_job in by_job.items():  # requeued tasks of one gang go back as one gang
            job = jobs[job_id]
            out.extend(("task-demand", job.pool, "peloton.GangDemand", g)
                       for g in gang_records(job, tasks_of_job, now))


    def recover(self) -> None:
        """After the broker lost its log: send again the demand of every task still PENDING.
        Entitle dedupes what it queued, and admits again what it holds but was never placed."""
        jobs = {j.job_id: j for j in self.store.active_jobs()}
        pending = self.store.pending_tasks_of_jobs(list(jobs))
        by_job: dict[str, list[TaskRow]] = {}
        for t in pending:
            by_job.setdefault(t.job_id, []).append(t)
        now = now_ms()
        for job_id, tasks in by_job.items():
            for g in gang_records(jobs[job_id], tasks, now):
                self.emit.emit("task-demand", jobs[job_id].pool, "peloton.GangDemand", g)
        log.info("recovery: %d pending tasks of %d jobs sent again", len(pending), len(by_job))

    def close(self) -> None:
        self.hosts.close()


def new_job_id() -> str:
    return str(uuid.uuid4())
