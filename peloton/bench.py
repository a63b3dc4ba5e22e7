"""`make bench`: the whole pipeline's rate on simulated hosts, in a throwaway stack.

Figures are printed, never asserted: these machines are shared and noisy."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from peloton.admin import create_pool, host_capacities, submit_job
from peloton.config import Settings
from peloton.devstack import DevStack
from peloton.store import open_store
from peloton.watch import wait_for_jobs

BENCH_POOL = """
name: bench
resources:
- {kind: cpu, reservation: 100000, limit: 100000, share: 1}
- {kind: memory, reservation: 100000000, limit: 100000000, share: 1}
- {kind: disk, reservation: 100000000, limit: 100000000, share: 1}
"""

BENCH_JOB = """
name: bench-{tasks}
instancecount: {tasks}
defaultconfig:
  resource: {{cpulimit: 0.1, memlimitmb: 2, disklimitmb: 1}}
  command: {{shell: true, value: 'true'}}
"""


def run_pipeline_bench(console, tasks: int, hosts: str, task_seconds: float, store_kind: str = "sqlite") -> dict:
    home = Path(tempfile.mkdtemp(prefix="peloton-bench-"))
    stack = DevStack(Settings.from_env(home=home, store=str(home / "peloton.db"), hosts=hosts,
                                       sim_task_seconds=task_seconds))
    stack.up(progress=lambda m: console.print(m, highlight=False), store=store_kind)
    try:
        settings = stack.settings
        store = open_store(settings.store)
        create_pool(settings, store, "/bench", BENCH_POOL)
        capacities = host_capacities(settings)
        started = time.monotonic()
        job_id = submit_job(settings, store, "/bench", BENCH_JOB.format(tasks=tasks), hosts=capacities)
        result = wait_for_jobs(store, [job_id], timeout=max(120.0, tasks / 50), console=console)[job_id]
        elapsed = time.monotonic() - started
        figures = {"tasks": tasks, "hosts": hosts, "store": store_kind, "task_seconds": task_seconds,
                   "state": result["state"], "seconds": round(elapsed, 2),
                   "tasks_per_second": round(tasks / elapsed, 1)}
        console.print(f"pipeline: {tasks} tasks on {hosts} (sim task {task_seconds}s, {store_kind} store) -> "
                      f"{result['state']} in {elapsed:.1f}s: [bold]{tasks / elapsed:.0f} tasks/s[/bold] "
                      "submit-to-SUCCEEDED", highlight=False)
        return figures
    finally:
        stack.down(progress=lambda m: None)
