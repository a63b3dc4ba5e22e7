"""Store rows for the store's tests: a job, its tasks and their launch specs."""

from __future__ import annotations

from peloton.store import JobRow, TaskRow


def job(job_id: str) -> JobRow:
    return JobRow(job_id, "n", "/p", "BATCH", "PENDING", 2, 0, True, "PACK_HOST", "me", "cfg", 1, 1)


def task(job_id: str, i: int, state: str = "PENDING") -> TaskRow:
    return TaskRow(job_id, i, 1, f"{job_id}-{i}-1", "/p", f"{job_id}-0-1", state, {"task_id": f"{job_id}-{i}-1"})


def launch_spec_of(job_id: str, i: int, **other) -> dict:
    """A launch spec as expand_job makes one: its identity, then what a job's tasks share."""
    return {"task_id": f"{job_id}-{i}-1", "job_id": job_id, "instance": i, "run_id": 1,
            "resources": {"cpu": 0.5, "mem_mb": 64.0}, "command": "true", "labels": {"team": "x"},
            "prefer_host": "", **other}
