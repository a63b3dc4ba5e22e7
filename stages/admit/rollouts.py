"""Update workflows as the job manager runs them: begun by a command, moved on by its tasks'
statuses, steered (pause, resume, abort, rollback) by commands. workflow.py decides each step;
this writes what it decided (the job row keeps the workflow while it is active, the updates
table always) and puts its kills and demand in an Outbox. No Kafka."""

from __future__ import annotations

import logging

from peloton.store import JobRow, TaskRow
from stages.admit.commands import STOPPED
from stages.admit.lifecycle import RESTARTED
from stages.admit.outbox import Outbox
from stages.admit.owned_tasks import OwnedTasks
from stages.admit.slas import Slas
from stages.admit.workflow import (
    ACTIVE,
    FAILED,
    RESTART,
    START,
    STOP,
    abort,
    advance,
    begin_rollback,
    legacy_workflow,
    steer,
)
from stages.admit.writes import JobWrites

log = logging.getLogger("peloton.admit")


def same_workflow(a: dict, b: dict) -> bool:
    """Two states of a workflow alike but for when they were written."""
    return {k: v for k, v in a.items() if k != "updated_ms"} == {k: v for k, v in b.items() if k != "updated_ms"}


class Rollouts:
    def __init__(self, store: OwnedTasks, writes: JobWrites, slas: Slas):
        self.store = store
        self.writes = writes
        self.slas = slas

    def workflow(self, job: JobRow) -> dict | None:
        return legacy_workflow(job.rollout, job.job_id, job.config_version) if job.rollout else None

    def end(self, job: JobRow, why: str, now: int) -> None:
        """The job's workflow in progress, if any, ends ABORTED with the reason."""
        active = self.workflow(job)
        if active is not None:
            self.store.save_updates([abort(active, why, now)])
            job.rollout = None

    def begin(self, job: JobRow, wf: dict, tasks: list[TaskRow], now: int, box: Outbox) -> None:
        """A new workflow: the one in progress ends (as Peloton's new update aborts the old)."""
        self.end(job, f"superseded by update {wf['update_id']}", now)
        self.step(job, wf, tasks, now, box)
        log.info("job %s: %s %s over %d instances", job.job_id, wf["kind"].lower(), wf["update_id"],
                 len(wf["instances"]))

    def step(self, job: JobRow, wf: dict, tasks: list[TaskRow], now: int, box: Outbox,
             stored: dict | None = None) -> None:
        """Move a workflow on by its instances' tasks: the next batch's runs go KILLING with reason
        RESTARTED (their TASK_KILLED reruns them with the job's config as it is now)."""
        step = advance(wf, {t.instance: t for t in tasks}, now, self.slas.of(job)[2])
        if step.roll_back:
            self.roll_back(job, step.workflow, tasks, now, box)
            return
        wf = step.workflow
        if step.replace:
            by_instance = {t.instance: t for t in tasks}
            batch = [by_instance[i] for i in step.replace]
            if wf["kind"] == STOP:
                self.writes.kill(batch, STOPPED, f"stopped by {wf['requested_by']} (rolling stop {wf['update_id']})",
                                 now, box)
            elif wf["kind"] == START:
                self.writes.start(job, batch, None, now, box, later=False)
            else:
                name = f"{'a restart' if wf['kind'] == RESTART else 'an update'} ({wf['update_id']}, " \
                       f"{wf['requested_by']})"
                self.writes.kill(batch, RESTARTED, f"replaced by {name}", now, box)
        if stored is not None and same_workflow(stored, wf):
            return  # nothing moved: no write
        job.rollout = wf if wf["state"] in ACTIVE else None
        job.updated_ms = now
        self.store.update_jobs([job])
        self.store.save_updates([wf])

    def advance(self, job: JobRow, now: int, box: Outbox) -> None:
        """After status changes of a job with a workflow in progress."""
        wf = self.workflow(job)
        if wf is None:
            return
        self.step(job, wf, self.store.tasks_of_job(job.job_id), now, box, stored=wf)

    def roll_back(self, job: JobRow, wf: dict, tasks: list[TaskRow], now: int, box: Outbox) -> None:
        """The previous config again, as a new version, then every instance the update touched
        replaced once more."""
        text = self.store.job_config(job.job_id, wf["from_version"])
        if text is None:
            wf = {**wf, "state": FAILED, "message": f"{wf['message']}; config version {wf['from_version']} is not "
                                                     "kept, so nothing to roll back to", "completed_ms": now}
            self.step(job, wf, tasks, now, box)
            return
        version = job.config_version + 1
        job.config_text, job.config_version = text, version
        self.store.save_job_configs([(job.job_id, version, text, now)])
        self.slas.forget(job.job_id)  # the restored config's limits, read again
        self.step(job, begin_rollback(wf, version, now), tasks, now, box)
        log.warning("job %s: update %s rolls back to the config of version %d (now version %d): %s", job.job_id,
                    wf["update_id"], wf["from_version"], version, wf["message"])

    def steer(self, job: JobRow, cmd: dict, who: str, now: int, box: Outbox) -> str | None:
        """PAUSE, RESUME, ABORT or ROLLBACK of one of the job's updates; why not, or None."""
        update_id = cmd["update_id"] or ""
        if not update_id:
            return f"{cmd['kind']} names no update (update_id: the id `pelotonctl update list JOB` shows)"
        active = self.workflow(job)
        wf = active if active is not None and active["update_id"] == update_id else self.store.get_update(update_id)
        if wf is None or wf["job_id"] != job.job_id:
            return f"job {job.job_id} has no update {update_id!r}"
        steered, problem = steer(wf, cmd["kind"], who, now)
        if problem:
            return problem
        tasks = self.store.tasks_of_job(job.job_id)
        if cmd["kind"] == "ROLLBACK":
            self.roll_back(job, steered, tasks, now, box)
        else:
            self.step(job, steered, tasks, now, box)
        log.info("job %s: update %s %s by %s", job.job_id, update_id, cmd["kind"].lower(), who)
        return None
