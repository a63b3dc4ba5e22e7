"""Following jobs in the store: summaries and a live progress display for --wait and the demo."""

from __future__ import annotations

import time

from peloton.model.states import JOB_TERMINAL
from peloton.store import StorageGateway


def job_summary(store: StorageGateway, job_id: str) -> dict | None:
    job = store.get_job(job_id)
    if job is None:
        return None
    counts = store.task_state_counts([job_id])[job_id]
    return {
        "job_id": job.job_id, "name": job.name, "pool": job.pool, "type": job.type, "state": job.state,
        "instances": job.instance_count, "tasks": counts, "created_ms": job.created_ms,
        "completed_ms": job.completed_ms,
    }


def job_seconds(summary: dict) -> float:
    """Seconds from submission to completion (or to now while it runs)."""
    if not summary.get("created_ms"):
        return 0.0
    end = summary.get("completed_ms") or time.time() * 1000
    return (end - summary["created_ms"]) / 1000


def wait_for_jobs(store: StorageGateway, job_ids: list[str], timeout: float, console=None) -> dict[str, dict]:
    """Poll the store until every job is terminal or the timeout passes; show a bar per job."""
    deadline = time.monotonic() + timeout
    summaries: dict[str, dict] = {}
    progress = None
    bars = {}
    if console is not None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[detail]}"), console=console)
        progress.start()
    try:
        while True:
            for job_id in job_ids:
                s = job_summary(store, job_id) or {"job_id": job_id, "name": "?", "state": None, "instances": 0, "tasks": {}}
                summaries[job_id] = s
                if progress is not None:
                    done = sum(s["tasks"].get(k, 0) for k in ("SUCCEEDED", "FAILED", "KILLED", "LOST"))
                    running = s["tasks"].get("RUNNING", 0)
                    detail = f"{s['state'] or 'SUBMITTED':<9} running {running:<4} {job_seconds(s):5.1f}s"
                    if job_id not in bars:
                        bars[job_id] = progress.add_task(f"{s['name'][:28]:<28}", total=s["instances"] or None, detail=detail)
                    progress.update(bars[job_id], description=f"{s['name'][:28]:<28}", completed=done,
                                    total=s["instances"] or None, detail=detail)
            if all(s["state"] in JOB_TERMINAL for s in summaries.values()) or time.monotonic() > deadline:
                return summaries
            time.sleep(0.2)
    finally:
        if progress is not None:
            progress.stop()
