"""Records that more than one stage writes, built in one place."""

from __future__ import annotations

import itertools
import os
import time
from typing import TYPE_CHECKING

from peloton.model.mesos import MesosState, Reason

if TYPE_CHECKING:
    from peloton.runtime.emitter import Emitter


def task_id_of(job_id: str, instance: int, run_id: int) -> str:
    """A run's task id: <job id>-<instance>-<run id> (split_task_id reads it back)."""
    return f"{job_id}-{instance}-{run_id}"


def split_task_id(task_id: str) -> tuple[str, int, int]:
    """<job id>-<instance>-<run id> (job ids may hold dashes themselves); ValueError otherwise."""
    job_id, instance, run_id = task_id.rsplit("-", 2)
    return job_id, int(instance), int(run_id)


def new_id() -> str:
    """A unique id for an event, a kill or a placement (32 hex digits, like uuid4().hex): a random
    prefix per process and a counter, far cheaper than uuid4 in the host manager's hot path."""
    return f"{_id_prefix}{next(_id_counter):016x}"


_id_prefix: str  # set by _new_prefix, here and in a forked child
_id_counter: itertools.count[int]


def _new_prefix() -> None:
    global _id_prefix, _id_counter
    _id_prefix, _id_counter = os.urandom(8).hex(), itertools.count()


_new_prefix()
os.register_at_fork(after_in_child=_new_prefix)  # a forked child must not repeat its parent's ids


def task_status(job_id: str, instance: int, run_id: int, task_id: str, host_id: str, state: str, reason: str = "",
                message: str = "", exit_code: int | None = None, signal: int | None = None,
                timestamp_ms: int | None = None, health: str = "") -> dict:
    """A TaskStatus record (schemas/avro/TaskStatus.avsc)."""
    return {
        "event_id": new_id(), "task_id": task_id, "job_id": job_id, "instance": instance,
        "run_id": run_id, "host_id": host_id, "state": state, "reason": reason, "message": message,
        "exit_code": exit_code, "signal": signal, "timestamp_ms": timestamp_ms or int(time.time() * 1000),
        "health": health,
    }


def task_kill(job_id: str, instance: int, run_id: int, task_id: str, reason: str, message: str,
              timestamp_ms: int | None = None) -> dict:
    """A TaskKill record (schemas/avro/TaskKill.avsc): stop this run wherever it is."""
    return {
        "kill_id": new_id(), "task_id": task_id, "job_id": job_id, "instance": instance, "run_id": run_id,
        "reason": reason, "message": message, "timestamp_ms": timestamp_ms or int(time.time() * 1000),
    }


def send_progress(emit: Emitter, state: str, steps: list[tuple[dict, str]]) -> None:
    """Tell the job manager that runs reached `state` (READY, PLACING, PLACED, LAUNCHING): one
    TaskProgress record per job on task-status. `steps` holds (TaskLaunchSpec record, host id or "")."""
    for job_id, record in task_progress(state, steps):
        emit.emit("task-status", job_id, "peloton.TaskProgress", record)


def task_progress(state: str, steps: list[tuple[dict, str]], timestamp_ms: int | None = None) -> list[tuple[str, dict]]:
    """TaskProgress records (schemas/avro/TaskProgress.avsc), one per job: (job id, record)."""
    by_job: dict[str, list[dict]] = {}
    for t, host_id in steps:
        by_job.setdefault(t["job_id"], []).append({"instance": t["instance"], "run_id": t["run_id"],
                                                   "host_id": host_id})
    at = timestamp_ms or int(time.time() * 1000)
    return [(job_id, {"event_id": new_id(), "job_id": job_id, "state": state, "runs": runs, "timestamp_ms": at})
            for job_id, runs in by_job.items()]


# Runs in one TaskStatusRuns record at most: a reader's batch is counted in records (as a bundle's
# items are), and this keeps a record of a large job's turn well under the broker's message limit.
RUNS_PER_RECORD = 500
TASK_STARTING, TASK_RUNNING = MesosState.TASK_STARTING, MesosState.TASK_RUNNING


class StatusRuns:
    """TaskStatusRuns records (schemas/avro/TaskStatusRuns.avsc) in the making: the host manager's
    status changes of a batch, one record per job and status (state, reason, message, exit code,
    signal, health) rather than a TaskStatus per run: a run in such a record costs a fraction of a
    TaskStatus of its own to make, encode and decode.

    Each run's changes stay in the order added: a change joins its status's latest record only
    where that record does not come before the one holding the run's last change. So a host's
    interleaved TASK_STARTING and TASK_RUNNING of many runs would make two records, STARTING's
    first; but a run's TASK_STARTING followed at once by its TASK_RUNNING of the same instant (as
    both drivers report a start) goes in the RUNNING record, `with_starting`, and its readers see
    the STARTING first (statuses_of_runs): one run less to write, send and read per start."""

    def __init__(self) -> None:
        self._records: list[tuple[str, dict]] = []  # (job id, record), in the order begun
        self._latest: dict[tuple, int] = {}  # (job id, status) -> index of its latest record
        self._last_of_run: dict[tuple[str, int, int], int] = {}  # run -> index of its last change's record
        # A plain TASK_STARTING held back (job id, instance, run id, host id, time): its TASK_RUNNING may follow.
        self._starting: tuple[str, int, int, str, int] | None = None

    @property
    def records(self) -> list[tuple[str, dict]]:
        self._let_go()
        return self._records

    def add(self, job_id: str, instance: int, run_id: int, host_id: str, state: str, timestamp_ms: int,
            reason: str = "", message: str = "", exit_code: int | None = None, signal: int | None = None,
            health: str = "") -> None:
        held = self._starting
        if held is not None:
            if state == TASK_RUNNING and held == (job_id, instance, run_id, host_id, timestamp_ms):
                self._starting = None
                self._add(job_id, instance, run_id, host_id, state, timestamp_ms, reason, message, exit_code, signal,
                          health, True)
                return
            self._let_go()
        if state == TASK_STARTING and not (reason or message or exit_code is not None or signal is not None or health):
            self._starting = (job_id, instance, run_id, host_id, timestamp_ms)
            return
        self._add(job_id, instance, run_id, host_id, state, timestamp_ms, reason, message, exit_code, signal, health)

    def _let_go(self) -> None:
        """The TASK_STARTING held back, on its own: no TASK_RUNNING of that instant followed."""
        if self._starting is not None:
            job_id, instance, run_id, host_id, timestamp_ms = self._starting
            self._starting = None
            self._add(job_id, instance, run_id, host_id, TASK_STARTING, timestamp_ms)

    def _add(self, job_id: str, instance: int, run_id: int, host_id: str, state: str, timestamp_ms: int,
             reason: str = "", message: str = "", exit_code: int | None = None, signal: int | None = None,
             health: str = "", with_starting: bool = False) -> None:
        key = (job_id, state, reason, message, exit_code, signal, health, with_starting)
        run = (job_id, instance, run_id)
        at = self._latest.get(key, -1)
        if at < 0 or at < self._last_of_run.get(run, -1) or len(self._records[at][1]["runs"]) >= RUNS_PER_RECORD:
            at = self._latest[key] = len(self._records)
            self._records.append((job_id, {
                "event_id": new_id(), "job_id": job_id, "state": state, "reason": reason, "message": message,
                "exit_code": exit_code, "signal": signal, "health": health, "with_starting": with_starting,
                "timestamp_ms": timestamp_ms, "runs": []}))
        record = self._records[at][1]
        record["runs"].append({"instance": instance, "run_id": run_id, "host_id": host_id,
                               "offset_ms": timestamp_ms - record["timestamp_ms"]})
        self._last_of_run[run] = at

    def send(self, emit: Emitter) -> None:
        """Emit the records on task-status, in the order begun."""
        for job_id, record in self.records:
            emit.emit("task-status", job_id, "peloton.TaskStatusRuns", record)


def statuses_of_runs(runs: dict) -> list[dict]:
    """The TaskStatus each run of a TaskStatusRuns record stands for (event ids the record's), in
    its order; where the record is `with_starting`, each run's TASK_STARTING first, all of them
    before the TASK_RUNNINGs, as the two records it stands for would have come. Each is a copy of
    one made for the record, filled with its run's fields: half the time of a dict written out per
    run."""
    job_id, at = runs["job_id"], runs["timestamp_ms"]
    shared = {"event_id": runs["event_id"], "task_id": "", "job_id": job_id, "instance": 0, "run_id": 0,
              "host_id": "", "state": runs["state"], "reason": runs["reason"], "message": runs["message"],
              "exit_code": runs["exit_code"], "signal": runs["signal"], "timestamp_ms": 0, "health": runs["health"]}
    kinds = [shared]
    if runs.get("with_starting"):
        kinds.insert(0, {**shared, "state": TASK_STARTING, "reason": "", "message": "", "exit_code": None,
                         "signal": None, "health": ""})
    out = []
    for kind in kinds:
        for run in runs["runs"]:
            status = kind.copy()
            status["task_id"] = task_id_of(job_id, instance := run["instance"], run_id := run["run_id"])
            status["instance"], status["run_id"] = instance, run_id
            status["host_id"], status["timestamp_ms"] = run["host_id"], at + run["offset_ms"]
            out.append(status)
    return out


def task_errors(tasks: list[dict], message: str) -> list[dict]:
    """TASK_ERROR statuses for the tasks (TaskLaunchSpec records) of a gang a stage refused: the job
    manager ends those runs FAILED with the reason, so the job does not wait for ever."""
    out = []
    for t in tasks:
        try:
            out.append(task_status(str(t["job_id"]), int(t["instance"]), int(t["run_id"]), str(t["task_id"]), "",
                                   MesosState.TASK_ERROR, reason=Reason.TASK_INVALID, message=message[:2000]))
        except (KeyError, TypeError, ValueError):
            continue  # not even a task we could name: the dead letter alone tells of it
    return out
