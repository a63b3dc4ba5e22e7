"""How much CPU the entitle stage (resource pools, admission) spends per task, the stage alone:
no Kafka.

    .venv/bin/python -m pelotonctl.bench.entitle_stage            # 10 jobs of 1,000 one-task gangs
    .venv/bin/python -m pelotonctl.bench.entitle_stage 20 500 50  # jobs, gangs per job, batch

As the job manager's bench (job_manager.py) does for admit: the stage's own work in CPU seconds,
on a real SQLite file, with its input as the runtime hands it over (pelotonctl/bench/alone.py).
Each job's one-task gangs arrive as GangDemand records in batches of `batch` (queued, then
admitted in the same turn), a tick follows each batch (the admissions sent are taken off the
store's queue, usage is published), and then each run's end arrives as a TaskRelease, in batches
of the same size. The pool is large enough that every gang is admitted at once: the figures are
the cost of the path every task takes, not of waiting.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from peloton.config import Settings
from peloton.runtime import StaticView
from peloton.topics import Catalogue
from pelotonctl.bench.alone import CpuByStep, batches, dropped, host_state, launch_spec, pooled_store, records

HOSTS = 1000
STEPS = ("demand", "tick", "release")


def _gang(job_id: str, instance: int) -> dict:
    """A one-task gang as admit sends it (GangDemand)."""
    task = launch_spec(job_id, instance)
    return {"gang_id": task["task_id"], "job_id": job_id, "pool": "/p", "priority": 0, "preemptible": True,
            "revocable": False, "not_before_ms": 0, "avoid_hosts": [], "placement_strategy": "PACK_HOST",
            "tasks": [task], "created_ms": int(time.time() * 1000)}


def bench_entitle_stage(jobs: int = 10, gangs_per_job: int = 1000, batch: int = 100) -> dict:
    """CPU microseconds per task of each step and in all, and how many gangs were admitted."""
    from stages.entitle.stage import EntitleStage

    home = Path(tempfile.mkdtemp(prefix="peloton-entitle-bench-"))
    try:
        catalogue = Catalogue()
        store = pooled_store(home)
        stage = EntitleStage(store, usage=StaticView(),
                             hosts=StaticView({f"h{i}": host_state(f"h{i}") for i in range(HOSTS)}))
        stage.read_back = lambda *_args: []  # no earlier owner's admissions to read back
        emitter = dropped(catalogue, "entitle")
        stage.bind(emitter, Settings(), catalogue)
        stage.on_assign([("task-demand", p) for p in range(catalogue["task-demand"].partitions)])
        stage.tick(time.monotonic())  # the pool tree read, entitlements made
        emitter.send()
        cpu = CpuByStep(emitter)
        timed = cpu.timed
        for _ in range(jobs):
            job_id = str(uuid.uuid4())
            parts = batches(gangs_per_job, batch)
            for part in parts:
                demand = records(catalogue, "task-demand", "/p", "peloton.GangDemand", [_gang(job_id, i) for i in part])
                timed("demand", lambda demand=demand: stage.handle(demand))
                timed("tick", lambda: stage.tick(time.monotonic()))
            for part in parts:
                ends = records(catalogue, "task-demand", "/p", "peloton.TaskRelease", [{
                    "task_id": f"{job_id}-{i}-1", "job_id": job_id, "pool": "/p", "reason": "TASK_FINISHED",
                    "timestamp_ms": int(time.time() * 1000)} for i in part])
                timed("release", lambda ends=ends: stage.handle(ends))
        admitted = stage.admitted_gangs
        store.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {"jobs": jobs, "gangs_per_job": gangs_per_job, "batch": batch, "gangs_admitted": admitted,
            **cpu.per_task(jobs * gangs_per_job)}


def main() -> None:
    args = [int(a) for a in sys.argv[1:4]]
    r = bench_entitle_stage(*args)
    steps = ", ".join(f"{step} {us}" for step, us in r["cpu_us_per_task"].items())
    print(f"entitle alone, {r['jobs']} jobs of {r['gangs_per_job']:,} one-task gangs in batches of {r['batch']}: "
          f"{r['cpu_us_per_task_total']} us of CPU per task ({steps}); {r['gangs_admitted']:,} gangs admitted")


if __name__ == "__main__":
    main()
