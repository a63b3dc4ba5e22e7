"""What a job, a task and a job listing look like to people and programs: the one shape that
`pelotonctl ... --json` prints and the API answers."""

from __future__ import annotations

import yaml

from peloton.store.base import JobRow, QueryStore, TaskRow


def job_info(store: QueryStore, job: JobRow) -> dict:
    """A job's config (as submitted) and runtime: state, times, task counts."""
    counts = store.task_state_counts([job.job_id])[job.job_id]
    runtime = {"state": job.state, "config_version": job.config_version, "rollout": job.rollout,
               "created_ms": job.created_ms, "updated_ms": job.updated_ms,
               "completed_ms": job.completed_ms, "tasks": counts}
    info = {"job_id": job.job_id, "name": job.name, "pool": job.pool, "type": job.type, "owner": job.owner,
            "instances": job.instance_count, "priority": job.priority, "preemptible": job.preemptible,
            "revocable": job.revocable, "runtime": runtime}
    try:
        info["config"] = yaml.safe_load(job.config_text)
    except yaml.YAMLError:
        info["config"] = job.config_text
    return info


def job_row(job: JobRow) -> dict:
    """A job in a listing."""
    return {"job_id": job.job_id, "name": job.name, "pool": job.pool, "owner": job.owner, "state": job.state,
            "instances": job.instance_count, "created_ms": job.created_ms}


def task_row(t: TaskRow) -> dict:
    """A task in a job's listing."""
    return {"instance": t.instance, "run_id": t.run_id, "task_id": t.task_id, "state": t.state, "host": t.host_id,
            "exit_code": t.exit_code, "reason": t.reason, "message": t.message}


def task_info(job_id: str, task: TaskRow) -> dict:
    """One task: its current run, state, host, exit code, reason and message."""
    return {"job_id": job_id, "instance": task.instance, "run_id": task.run_id, "task_id": task.task_id,
            "state": task.state, "host": task.host_id, "exit_code": task.exit_code, "signal": task.signal,
            "reason": task.reason, "message": task.message, "failures": task.failures,
            "max_failures": task.max_failures, "resources": task.spec.get("resources", {})}


def token_row(t) -> dict:
    """A token as listed: never the token itself (the store has only its hash)."""
    return {"token_id": t.token_id, "user": t.user, "groups": list(t.groups), "admin": t.admin,
            "created_ms": t.created_ms, "revoked_ms": t.revoked_ms}
