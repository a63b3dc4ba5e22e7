"""Following jobs in the store: summaries and a live progress display for --wait and the demo."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from peloton.config import Settings
from peloton.model.mesos import Reason
from peloton.model.states import JOB_TERMINAL, UNPLACED
from peloton.store import QueryStore


def job_summary(store: QueryStore, job_id: str, settings: Settings | None = None,
                published: Callable[[], dict[str, dict]] | None = None,
                hosts: Callable[[], list[dict]] | None = None) -> dict | None:
    """A job's state and task counts. With settings (so the broker can be asked), also why its
    pending gangs wait, as its pool's resource manager last published, and its failed runs; for
    a DAEMON job, every host and its instance or why it has none running. published and hosts:
    the entitlements and host-state records of views the caller keeps (the API's), rather than
    ones read for this call."""
    job = store.get_job(job_id)
    if job is None:
        return None
    counts = store.task_state_counts([job_id])[job_id]
    summary = {
        "job_id": job.job_id, "name": job.name, "pool": job.pool, "type": job.type, "state": job.state,
        "instances": job.instance_count, "tasks": counts, "created_ms": job.created_ms,
        "completed_ms": job.completed_ms,
    }
    if settings is not None:
        tasks = store.tasks_of_job(job_id)
        summary["failures"] = [_told(t) for t in tasks if t.state in ("FAILED", "LOST")][:20]
        late = not_started(tasks, int(time.time() * 1000), late_start_s(settings))
        if late:
            summary["not_started"], summary["not_started_tasks"] = late[:20], len(late)
        if job.state not in JOB_TERMINAL and any(counts.get(s) for s in UNPLACED):
            summary["waiting"] = (waiting_gangs(settings, job.pool, job_id) if published is None else [
                w for w in published().get(job.pool, {}).get("waiting", []) if w["job_id"] == job_id])
            summary["unplaced"] = [_told(t) for t in unplaced(tasks)][:20]
        if job.type == "DAEMON":
            from pelotonctl.admin import list_hosts

            summary["daemon_hosts"] = daemon_hosts(job, tasks, hosts() if hosts else list_hosts(settings))
    return summary


def daemon_hosts(job: Any, tasks: list, hosts: list[dict]) -> list[dict]:
    """Each host a DAEMON job knows or could run on: its instance there and that instance's state,
    and, where none runs, why (peloton.model.daemon)."""
    from peloton.model.daemon import bound_hosts, reconcile, why_not
    from peloton.model.jobconfig import parse_job_config

    try:
        constraint = parse_job_config(job.config_text).tasks[0].constraint
    except ValueError:
        constraint = None
    bound = bound_hosts({t.instance: t.spec for t in tasks})
    on = {h: i for i, h in bound.items()}
    states = {t.instance: t.state for t in tasks}
    by_id = {h["host_id"]: h for h in hosts}
    plan = reconcile(constraint, bound, states, by_id, 0)
    rows = []
    for host_id in sorted(set(by_id) | set(on)):
        instance = on.get(host_id)
        state = states.get(instance) if instance is not None else None
        why = "" if state == "RUNNING" else plan.waiting.get(host_id) or why_not(by_id.get(host_id), constraint)
        if why == "eligible":
            why = "no instance yet: the job manager adds one within a second or two"
        rows.append({"host": host_id, "instance": instance, "state": state, "why": why})
    return rows


def unplaced(tasks: list) -> list:
    """The tasks placement gave a cycle up on (no host could take them; the message says why),
    also while they are tried again."""
    return [t for t in tasks if t.state in UNPLACED and t.reason == Reason.NO_HOST]


def late_start_s(settings: Settings) -> float:
    """How long a launched run may go unstarted before a job's status says so: a few of its
    agent's reports, each of which would have said it started."""
    return max(5.0, 3 * settings.agent_heartbeat_s)


def not_started(tasks: list, now_ms: int, after_s: float) -> list[dict]:
    """Runs launched on a host more than `after_s` ago that its agent has not reported started:
    it is behind on its commands, or cannot reach the broker. The host manager waits for it (a
    launch the agent has not read is not lost) until the agent reads past it or the host goes
    DOWN, so without this the job would wait with nothing saying why. Longest waiting first."""
    late = [t for t in tasks if t.state == "LAUNCHED" and t.updated_ms and now_ms - t.updated_ms >= after_s * 1000]
    late.sort(key=lambda t: (t.updated_ms, t.instance))
    return [{"instance": t.instance, "run_id": t.run_id, "host_id": t.host_id,
             "seconds": round((now_ms - t.updated_ms) / 1000, 1)} for t in late]


def _told(t) -> dict:
    return {"instance": t.instance, "run_id": t.run_id, "state": t.state, "reason": t.reason, "message": t.message}


def waiting_gangs(settings: Settings, pool: str, job_id: str) -> list[dict]:
    """The job's gangs among the first of its pool's queue, with the resource manager's reason;
    empty when the broker cannot be asked."""
    from confluent_kafka import KafkaException

    from peloton.runtime import CompactedView

    try:
        view = CompactedView(settings, "entitlements", quiet=True)
        try:
            view.catch_up(timeout=3.0)
        finally:
            view.close()
    except KafkaException:
        return []
    record = view.values.get(pool) or {}
    return [w for w in record.get("waiting", []) if w["job_id"] == job_id]


def job_seconds(summary: dict) -> float:
    """Seconds from submission to completion (or to now while it runs)."""
    if not summary.get("created_ms"):
        return 0.0
    end = summary.get("completed_ms") or time.time() * 1000
    return (end - summary["created_ms"]) / 1000


def wait_for_jobs(source, job_ids: list[str], timeout: float, console=None) -> dict[str, dict]:
    """Poll until every job is terminal or the timeout passes; show a bar per job. `source` is a
    store, or a function job id -> its summary (None while it is not stored), as the API answers."""
    summary_of = source if callable(source) else (lambda job_id: job_summary(source, job_id))
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
                s = summary_of(job_id) or {"job_id": job_id, "name": "?", "state": None, "instances": 0, "tasks": {}}
                summaries[job_id] = s
                if progress is not None:
                    done = sum(s["tasks"].get(k, 0) for k in ("SUCCEEDED", "FAILED", "KILLED", "LOST"))
                    running = s["tasks"].get("RUNNING", 0)
                    detail = f"{s['state'] or 'SUBMITTED':<9} running {running:<4} {job_seconds(s):5.1f}s"
                    if job_id not in bars:
                        bars[job_id] = progress.add_task(f"{s['name'][:28]:<28}", total=s["instances"] or None,
                                                         detail=detail)
                    progress.update(bars[job_id], description=f"{s['name'][:28]:<28}", completed=done,
                                    total=s["instances"] or None, detail=detail)
            if all(s["state"] in JOB_TERMINAL for s in summaries.values()) or time.monotonic() > deadline:
                return summaries
            time.sleep(0.2)
    finally:
        if progress is not None:
            progress.stop()
