"""What a job, a task and a job listing look like to people and programs: the one shape that
`pelotonctl ... --json` prints and the API answers."""

from __future__ import annotations

import yaml

from peloton.model.states import JOB_TERMINAL
from peloton.model.termination import termination_status
from peloton.model.usage import usage_in
from peloton.store.base import JobRow, QueryStore, TaskRow


def job_info(store: QueryStore, job: JobRow, version: int | None = None, retention_s: float = 0) -> dict:
    """A job's config (as submitted; of `version`, when given) and runtime: state, times, task
    counts, the update in progress, and for a job that ended when it is deleted (retention_s
    after its end, the job manager's PELOTON_JOB_RETENTION_S; never when 0). NotFound for a
    version the job never had."""
    from pelotonctl.admin import NotFound

    text = job.config_text
    if version is not None and version != job.config_version:
        text = store.job_config(job.job_id, version)
        if text is None:
            raise NotFound(f"job {job.job_id} has no config version {version} (its current one is "
                           f"{job.config_version})")
    counts = store.task_state_counts([job.job_id])[job.job_id]
    active = job.rollout and {k: job.rollout.get(k) for k in ("update_id", "kind", "state")}
    runtime = {"state": job.state, "config_version": job.config_version, "update": active or None,
               "created_ms": job.created_ms, "updated_ms": job.updated_ms,
               "completed_ms": job.completed_ms, "tasks": counts,
               "kept_until_ms": job.completed_ms + int(retention_s * 1000)
               if retention_s > 0 and job.completed_ms is not None and job.state in JOB_TERMINAL else None}
    info = {"job_id": job.job_id, "name": job.name, "pool": job.pool, "type": job.type, "owner": job.owner,
            "instances": job.instance_count, "priority": job.priority, "preemptible": job.preemptible,
            "revocable": job.revocable, "runtime": runtime, "config_version": version or job.config_version}
    try:
        info["config"] = yaml.safe_load(text)
    except yaml.YAMLError:
        info["config"] = text
    return info


def update_info(wf: dict) -> dict:
    """An update workflow as `update get` and the API show it."""
    from stages.admit.workflow import summary

    return summary(wf)


def job_row(job: JobRow) -> dict:
    """A job in a listing."""
    return {"job_id": job.job_id, "name": job.name, "pool": job.pool, "owner": job.owner, "state": job.state,
            "instances": job.instance_count, "created_ms": job.created_ms}


def task_row(t: TaskRow) -> dict:
    """A task in a job's listing."""
    return {"instance": t.instance, "run_id": t.run_id, "task_id": t.task_id, "state": t.state, "host": t.host_id,
            "health": t.health, "exit_code": t.exit_code, "reason": t.reason,
            "termination": termination_status(t.state, t.reason), "message": t.message, **usage_in(t.message)}


def task_info(job_id: str, task: TaskRow) -> dict:
    """One task: its current run, state, host, exit code, reason and message."""
    return {"job_id": job_id, "instance": task.instance, "run_id": task.run_id, "task_id": task.task_id,
            "state": task.state, "health": task.health, "host": task.host_id, "exit_code": task.exit_code,
            "signal": task.signal,
            "reason": task.reason, "termination": termination_status(task.state, task.reason),
            "message": task.message, **usage_in(task.message), "failures": task.failures,
            "max_failures": task.max_failures, "resources": task.spec.get("resources", {})}


def token_row(t) -> dict:
    """A token as listed: never the token itself (the store has only its hash)."""
    return {"token_id": t.token_id, "user": t.user, "groups": list(t.groups), "admin": t.admin,
            "created_ms": t.created_ms, "revoked_ms": t.revoked_ms}


def event_row(event: dict) -> dict:
    """A run's state change as `task events` and the API show it: with what the run used, where
    its agent's cgroup counted it."""
    return {**event, **usage_in(event.get("message"))}
