"""`make demo`: the stack up, the example jobs through all four stages, a summary, the stack down."""

from __future__ import annotations

import time
from dataclasses import replace

from rich.table import Table

from peloton.config import REPO_ROOT, Settings
from peloton.store import open_store
from pelotonctl.admin import emitter, host_capacities, submit_job
from pelotonctl.dev.stack import DEFAULT_POOL, DevStack
from pelotonctl.watch import job_seconds, wait_for_jobs

DEMO_JOBS = ["hello.yaml", "gang.yaml", "retry.yaml", "fanout.yaml"]


def run_demo(settings: Settings, console, keep: bool = False, timeout: float = 300) -> int:
    stack = DevStack(settings)
    console.rule("starting the dev stack")
    stack.up(progress=lambda m: console.print(m, highlight=False))
    try:
        # The demo sends its jobs straight to Kafka, signed with the stack's admin token.
        settings = replace(stack.settings, command_token=(stack.read() or {}).get("command_token", ""))
        store = open_store(settings.store)
        console.rule(f"submitting {len(DEMO_JOBS)} example jobs to {DEFAULT_POOL}")
        out = emitter(settings)
        hosts = host_capacities(settings)
        job_ids = []
        for name in DEMO_JOBS:
            path = REPO_ROOT / "examples" / "jobs" / name
            job_ids.append(submit_job(settings, store, DEFAULT_POOL, path.read_text(), out=out, hosts=hosts))
            console.print(f"{name:<12} -> job {job_ids[-1]}", highlight=False)
        results = wait_for_jobs(store, job_ids, timeout, console)
        return _summary(console, store, job_ids, results, stack)
    finally:
        if not keep:
            console.rule("stopping the dev stack")
            stack.down(progress=lambda m: console.print(m, highlight=False))


def _summary(console, store, job_ids, results, stack) -> int:
    table = Table("job", "name", "state", "instances", "task runs", "retries", "seconds")
    runs_total = 0
    for job_id in job_ids:
        s = results[job_id]
        tasks = store.tasks_of_job(job_id)
        runs = sum(t.run_id for t in tasks)
        runs_total += runs
        table.add_row(job_id[:8], s["name"], s["state"] or "NOT STORED", str(s["instances"]), str(runs),
                      str(runs - len(tasks)), f"{job_seconds(s):.1f}")
    console.rule("summary")
    console.print(table)
    ok = all(results[j]["state"] == "SUCCEEDED" for j in job_ids)
    # From the first job stored to the last one finished, as the store recorded them.
    first = min(results[j]["created_ms"] or 0 for j in job_ids)
    last = max(results[j]["completed_ms"] or time.time() * 1000 for j in job_ids)
    elapsed = max((last - first) / 1000, 0.001)
    console.print(f"{runs_total} task runs through admit -> entitle -> place -> launch in {elapsed:.1f}s: "
                  f"[bold]{runs_total / elapsed:.0f} tasks/s[/bold] (hosts {stack.settings.hosts}, pool limit 12 cpu)",
                  highlight=False)
    if not ok:
        console.print(f"[red]not every job SUCCEEDED[/red]; stage logs are in {stack.dir / 'logs'}")
    return 0 if ok else 1
