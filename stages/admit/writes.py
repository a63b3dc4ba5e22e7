"""The job manager's writes of runs and jobs, shared by commands, statuses and checks: each
decided by runs.py or lifecycle.py, written to the store, and its sends put in an Outbox (never
sent from here). No Kafka."""

from __future__ import annotations

from collections import Counter

from peloton import metrics
from peloton.model.states import JOB_TERMINAL
from peloton.runtime import Record, now_ms
from peloton.store import JobRow, TaskEvent, TaskRow
from stages.admit.expand import gang_records
from stages.admit.lifecycle import job_state
from stages.admit.outbox import Outbox
from stages.admit.owned_tasks import OwnedTasks
from stages.admit.runs import kill_runs, release_throttled, start_runs


class JobWrites:
    def __init__(self, store: OwnedTasks):
        self.store = store

    def record_events(self, events: list[TaskEvent]) -> None:
        self.store.record_task_events(events)
        for state, n in Counter(e[4] for e in events).items():
            metrics.TASK_TRANSITIONS.labels(state).inc(n)

    def refuse(self, r: Record, reason: str, box: Outbox) -> None:
        """A command the job manager will not act on: a dead letter for operators, and a row the
        sender's command status reads (the API answers with the reason)."""
        box.dead_letter(r, reason)
        cmd = r.value
        self.store.refuse_command(cmd["command_id"], cmd["job_id"], cmd["pool"] or "", cmd["kind"], reason, now_ms())

    def kill(self, tasks: list[TaskRow], reason: str, message: str, now: int, box: Outbox) -> None:
        """The tasks' current runs go KILLING with the reason, recorded, and are killed wherever
        they are (runs.kill_runs)."""
        events = kill_runs(tasks, reason, message, now, box)
        self.store.save_tasks(tasks)
        self.record_events(events)

    def start(self, job: JobRow, tasks: list[TaskRow], instances: list[int] | None, now: int, box: Outbox,
              later: bool = True) -> None:
        """Stopped (KILLED) tasks run again (runs.start_runs); their demand goes with the batch's
        output (`later`) or ahead of it, as a workflow's step sends it."""
        again, events = start_runs(tasks, instances, now)
        if not again:
            return
        self.store.save_tasks(again)
        self.record_events(events)
        job.state, job.completed_ms = "PENDING", None
        self.settle(job, now)
        demand = [("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, again, now)]
        if later:
            box.later.extend(demand)
        else:
            box.demand_now(demand)

    def controller_state(self, job: JobRow) -> str | None:
        """The state of the job's controller task (only instance 0 may be one), or None."""
        task = self.store.tasks_by_instance([(job.job_id, 0)]).get((job.job_id, 0))
        return task.state if task is not None and task.spec is not None and task.spec.get("controller") else None

    def state_of(self, job: JobRow, counts: dict[str, int], current: str) -> str:
        """The job's state by its tasks' counts; its controller's, if it has one, once it ends."""
        state = job_state(counts, job.instance_count, current)
        if job.type == "DAEMON" and state in JOB_TERMINAL and current != "KILLING":
            # Its instances end as their hosts leave; only a stop of the whole job ends a daemon.
            return "RUNNING" if counts.get("RUNNING", 0) else "PENDING"
        if state in JOB_TERMINAL:
            state = job_state(counts, job.instance_count, current, self.controller_state(job))
        return state

    def settle(self, job: JobRow, now: int) -> None:
        """The job's state from its tasks' counts now (the current state may be set for the rules)."""
        counts = self.store.task_state_counts([job.job_id])[job.job_id]
        state = self.state_of(job, counts, job.state if job.state not in JOB_TERMINAL else "PENDING")
        job.state, job.updated_ms = state, now
        if state in JOB_TERMINAL:
            job.completed_ms = job.completed_ms or now
        self.store.update_jobs([job])

    def release_throttled(self, job: JobRow, maximum: int, now: int, box: Outbox) -> None:
        """Tasks held INITIALIZED by sla.maximumRunningInstances (`maximum`) go PENDING as room
        opens (runs.release_throttled), their demand with the batch's output."""
        if maximum <= 0:
            return
        go = release_throttled(self.store.tasks_of_job(job.job_id), maximum, now)
        if not go:
            return
        self.store.save_tasks(go)
        box.later.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, go, now))
