"""Task statuses and steps before launch -> what they do to the runs of the job manager's tasks.
Pure: no Kafka, no store. The stage reads the tasks and jobs a batch names, asks
apply_statuses, then writes the rows and events it returns and sends its Outbox.

A batch's records come in three kinds (Step.kind): a run of a TaskProgress record as it is there
(STEP), a TaskStatus (STATUS), or the TaskStatus a run of a TaskStatusRuns record stands for
(MADE, its task id made here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from peloton.model.daemon import bound_host, daemon_task
from peloton.model.events import statuses_of_runs, task_id_of
from peloton.model.health import DISABLED
from peloton.model.jobspec import JobSpec
from peloton.model.mesos import LATE_END_REASONS, MESOS_TERMINAL, MesosState
from peloton.model.states import MESOS_TO_TASK, TASK_ORDER, TASK_TERMINAL
from peloton.model.volumes import kept_home
from peloton.runtime import Record
from peloton.store import JobRow, TaskEvent, TaskRow
from stages.admit.commands import ORPHAN, STOPPED
from stages.admit.expand import gang_records, launch_spec, next_run, requeued_gang_id
from stages.admit.lifecycle import (
    RESTARTED,
    Transition,
    progress_transition,
    service_backoff_s,
    status_problem,
    task_transition,
)
from stages.admit.outbox import Out, Outbox

# A run reporting itself alive.
LIVE = frozenset({MesosState.TASK_STAGING, MesosState.TASK_STARTING, MesosState.TASK_RUNNING})
STEP, STATUS, MADE = "step", "status", "made"

Key = tuple[str, int]  # (job id, instance)


class Step(NamedTuple):
    """One status a batch holds: the record it came in, the event (a run's status), what it is."""

    record: Record
    event: dict
    kind: str  # STEP, STATUS or MADE


def status_steps(records: list[Record]) -> tuple[list[Step], list[Key]]:
    """The batch's events in the order they came, and the tasks they name."""
    steps: list[Step] = []
    keys = set()
    for r in records:
        if r.schema == "peloton.TaskProgress":
            job_id = r.value["job_id"]
            for run in r.value["runs"]:
                steps.append(Step(r, run, STEP))
                keys.add((job_id, run["instance"]))
            continue
        if r.schema == "peloton.TaskStatusRuns":
            of_record, kind = statuses_of_runs(r.value), MADE
        else:
            of_record, kind = [r.value], STATUS
        for ev in of_record:
            steps.append(Step(r, ev, kind))
            keys.add((ev["job_id"], ev["instance"]))
    return steps, list(keys)


@dataclass(slots=True)
class StatusOutcome:
    """What a batch of statuses does: the rows it changed (written by the caller), the events to
    record, kills and dead letters in the order decided (out.now), releases (out.later)."""

    changed: dict[Key, TaskRow] = field(default_factory=dict)
    respecced: set[Key] = field(default_factory=set)  # a new run: its spec changed too
    reruns: list[TaskRow] = field(default_factory=list)  # runs again, or back to its pool's queue
    delays: dict[str, int] = field(default_factory=dict)  # task id of a SERVICE task's next run -> its backoff (ms)
    events: list[TaskEvent] = field(default_factory=list)
    out: Outbox = field(default_factory=Outbox)


class StatusBatch:
    """One batch's statuses applied to its tasks' rows (changed in place) in the order they came."""

    def __init__(self, tasks: dict[Key, TaskRow], jobs: dict[str, JobRow], now: int,
                 spec_of: Callable[[TaskRow], dict | None], parse: Callable[[str], JobSpec], backoff_base_s: float,
                 requeue_batch: str):
        self.tasks = tasks
        self.jobs = jobs
        self.now = now
        self.spec_of = spec_of  # a run's spec, read when it must run again (rows come without it)
        self.parse = parse
        self.backoff_base_s = backoff_base_s
        self.requeue_batch = requeue_batch  # the gang ids of tasks sent back to their queue
        self.specs: dict[str, JobSpec] = {}  # job id -> its parsed config, for replacements
        self.got = StatusOutcome()

    def apply(self, steps: list[Step]) -> StatusOutcome:
        for r, ev, kind in steps:
            if kind == STEP:
                self._step(r.value, ev)
            else:
                self._status(r, ev, kind)
        return self.got

    def _step(self, step: dict, ev: dict) -> None:
        """A step before launch of a run that has moved on, or of a job deleted meanwhile, says
        nothing any more: it is dropped, not dead-lettered."""
        task = self.tasks.get((step["job_id"], ev["instance"]))
        if task is None:
            return
        move = progress_transition(task.state, task.run_id, ev["run_id"], step["state"])
        if move is None:
            return
        # Of the task's current run: its task id is the run's.
        events = self.got.events
        if move.state != step["state"] and TASK_ORDER[step["state"]] > TASK_ORDER[task.state]:
            # the step itself, then where it leaves the run (LAUNCHING: launched)
            events.append(TaskEvent(task.task_id, task.job_id, task.instance, task.run_id, step["state"], "",
                           None, step["timestamp_ms"], ev["host_id"], ""))
        events.append(TaskEvent(task.task_id, task.job_id, task.instance, task.run_id, move.state, "", None,
                       step["timestamp_ms"], ev["host_id"], ""))
        task.state = move.state
        task.host_id = ev["host_id"] or task.host_id
        task.updated_ms = self.now
        if move.state in ("PLACED", "LAUNCHED"):  # why it waited is over
            task.reason, task.message = "", ""
        self.got.changed[(task.job_id, task.instance)] = task

    def _status(self, r: Record, ev: dict, kind: str) -> None:
        task = self.tasks.get((ev["job_id"], ev["instance"]))
        problem = status_problem(task is not None, ev, id_made=kind == MADE)
        if problem or task is None:
            self._refuse(r, ev, problem or "")
            return
        out = self.got.out
        if ev["run_id"] < task.run_id and ev["state"] in LIVE:
            # An older run still reports itself alive (its host came back): only the current
            # run may hold the task's place, so the old one is stopped on its host.
            out.kill(ev["job_id"], ev["instance"], ev["run_id"], ev["task_id"], ORPHAN,
                     f"orphan: run {ev['run_id']} of a task now at run {task.run_id}", self.now)
        job = self.jobs.get(task.job_id)
        service = job.type in ("SERVICE", "DAEMON") if job is not None else False  # long-running: runs again
        # A stop wins over the reason of an earlier kill of the same run (a restart's, say),
        # which the host manager reports since it came first.
        reason = STOPPED if task.state == "KILLING" and task.reason == STOPPED else ev["reason"]
        move = task_transition(task.state, task.run_id, ev["run_id"], ev["state"], task.failures, task.max_failures,
                               reason, service)
        if move is not None and move.state in TASK_TERMINAL and job is not None \
                and task.instance >= job.instance_count:
            move = Transition("DELETED", release=move.release)  # removed by a shrink: it ends for good
        if move is None and _health_news(task, ev):
            # A health check changed how the running run is (the state stays RUNNING).
            self.got.events.append(TaskEvent(ev["task_id"], ev["job_id"], ev["instance"], ev["run_id"], "RUNNING",
                                    ev["reason"], None, ev["timestamp_ms"], ev["host_id"],
                                    f"{ev['health']}: {ev['message']}".rstrip(": ")))
            task.health, task.updated_ms = ev["health"], self.now
            self.got.changed[(task.job_id, task.instance)] = task
        elif move is None:
            self._unmoved(task, ev)
        else:
            self._move(task, ev, move, service)

    def _refuse(self, r: Record, ev: dict, problem: str) -> None:
        """A status about no task of ours: a dead letter, and a kill of its run if one still runs."""
        if (ev["job_id"], ev["instance"]) not in self.tasks and ev["state"] in LIVE and ev["host_id"] \
                and ev["task_id"] == task_id_of(ev["job_id"], ev["instance"], ev["run_id"]):
            # a run on a host of a task no longer known (its job deleted): stop it
            self.got.out.kill(ev["job_id"], ev["instance"], ev["run_id"], ev["task_id"], ORPHAN,
                              f"orphan: {problem}", self.now)
        self.got.out.dead_letter(one_status(r, ev), problem)

    def _unmoved(self, task: TaskRow, ev: dict) -> None:
        """A status that moves no run may still tell how an earlier one ended."""
        if ev["state"] in MESOS_TERMINAL and ev["reason"] in LATE_END_REASONS and ev["host_id"]:
            # How a run given up earlier ended on its host after all: its history says so.
            self.got.events.append(TaskEvent(ev["task_id"], ev["job_id"], ev["instance"], ev["run_id"],
                                    MESOS_TO_TASK.get(ev["state"], ev["state"]), ev["reason"], ev["exit_code"],
                                    ev["timestamp_ms"], ev["host_id"], ev["message"]))
        if ev["state"] in MESOS_TERMINAL and (ev["run_id"] < task.run_id or task.state in TASK_TERMINAL):
            # The end of a run this store already has: read again because the batch that
            # stored it died before its output committed, its release with it. Sent
            # again, so the run's allocation is not held for ever; entitle dedupes it.
            self.got.out.later.append(("task-demand", task.pool, "peloton.TaskRelease", {
                "task_id": ev["task_id"], "job_id": task.job_id, "pool": task.pool,
                "reason": ev["state"], "timestamp_ms": self.now}))

    def _move(self, task: TaskRow, ev: dict, move: Transition, service: bool) -> None:
        """The run moves: recorded, its allocation released if it ended, and, if it runs again
        or goes back to its pool, its next run made."""
        now = self.now
        # A run being replaced that ended on its own before the kill reached it: its next run
        # is still the replacement.
        replaced = ev["reason"] == RESTARTED or (task.state == "KILLING" and task.reason == RESTARTED)
        self.got.events.append(TaskEvent(ev["task_id"], ev["job_id"], ev["instance"], ev["run_id"], move.state,
                                ev["reason"], ev["exit_code"], ev["timestamp_ms"], ev["host_id"], ev["message"]))
        if move.release:
            release = {"task_id": task.task_id, "job_id": task.job_id, "pool": task.pool,
                       "reason": ev["state"], "timestamp_ms": now}
            self.got.out.later.append(("task-demand", task.pool, "peloton.TaskRelease", release))
        task.state = move.state
        if move.state == "RUNNING":
            task.health = ev.get("health") or DISABLED
        task.host_id = ev["host_id"] or task.host_id
        task.reason, task.message = ev["reason"], ev["message"]
        task.exit_code, task.signal = ev["exit_code"], ev["signal"]
        task.updated_ms = now
        if move.count_failure:
            task.failures += 1
        if (move.retry or move.requeue) and task.spec is None:
            task.spec = self.spec_of(task)
        if move.retry:
            self._rerun(task, replaced, service and move.count_failure)
        elif move.requeue:
            task.gang_id = requeued_gang_id(task.gang_id, self.requeue_batch)
        if move.retry or move.requeue:
            self.got.reruns.append(task)
        self.got.changed[(task.job_id, task.instance)] = task

    def _rerun(self, task: TaskRow, replaced: bool, backoff: bool) -> None:
        """The task's next run; a replacement's with the job's config as it is now."""
        next_run(task, self.now)
        self.got.respecced.add((task.job_id, task.instance))
        if replaced:
            job = self.jobs[task.job_id]
            self._respec(job, task)
            rollout = job.rollout or {}
            if rollout.get("options", {}).get("in_place") and task.host_id and task.spec is not None:
                task.spec["prefer_host"] = task.host_id  # back where it ran, where it fits
        if backoff:
            self.got.delays[task.task_id] = int(service_backoff_s(task.failures, self.backoff_base_s) * 1000)

    def _respec(self, job: JobRow, task: TaskRow) -> None:
        if job.job_id not in self.specs:
            self.specs[job.job_id] = self.parse(job.config_text)
        spec = self.specs[job.job_id]
        host = bound_host(task.spec) if job.type == "DAEMON" else None
        config = daemon_task(spec, task.instance, host) if host is not None else spec.tasks[task.instance]
        task.spec = kept_home(task.spec, launch_spec(job.job_id, spec, config, task.run_id))
        task.max_failures = config.max_failures


def apply_statuses(steps: list[Step], tasks: dict[Key, TaskRow], jobs: dict[str, JobRow], now: int,
                   spec_of: Callable[[TaskRow], dict | None], parse: Callable[[str], JobSpec], backoff_base_s: float,
                   requeue_batch: str) -> StatusOutcome:
    """`tasks`: the rows the batch names, by (job id, instance), without specs; `jobs`: their jobs."""
    return StatusBatch(tasks, jobs, now, spec_of, parse, backoff_base_s, requeue_batch).apply(steps)


def rerun_demand(jobs: dict[str, JobRow], reruns: list[TaskRow], delays: dict[str, int], now: int) -> list[Out]:
    """The demand of the tasks that run again or went back to their queue: requeued tasks of one
    gang go back as one gang; a SERVICE task's next run waits out its backoff in entitle."""
    by_job: dict[str, list[TaskRow]] = {}
    for task in reruns:
        by_job.setdefault(task.job_id, []).append(task)
    out: list[Out] = []
    for job_id, tasks_of_job in by_job.items():
        job = jobs[job_id]
        for g in gang_records(job, tasks_of_job, now):
            delay = max((delays.get(t["task_id"], 0) for t in g["tasks"]), default=0)
            if delay:
                g["not_before_ms"] = now + delay  # entitle keeps it queued until then
            out.append(("task-demand", job.pool, "peloton.GangDemand", g))
    return out


def one_status(r: Record, ev: dict) -> Record:
    """The record a status came in, or, for one run of a TaskStatusRuns, that run's TaskStatus
    alone (a dead letter holds it alone, to be replayed as it is)."""
    if r.schema != "peloton.TaskStatusRuns":
        return r
    at = next(i for i, run in enumerate(r.value["runs"]) if (run["instance"], run["run_id"], run["offset_ms"])
              == (ev["instance"], ev["run_id"], ev["timestamp_ms"] - r.value["timestamp_ms"]))
    return Record(r.topic, r.partition, r.offset, r.key, "peloton.TaskStatus", ev, r.raw_key, r.raw_value, at,
                  r.headers)


def _health_news(task: TaskRow, ev: dict) -> bool:
    """A TASK_RUNNING of the running current run that tells a health it did not have."""
    return (ev["state"] == MesosState.TASK_RUNNING and task.state == "RUNNING" and ev["run_id"] == task.run_id
            and bool(ev.get("health")) and ev["health"] != task.health)
