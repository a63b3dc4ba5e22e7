"""How much CPU the job manager (the admit stage) spends per task, the stage alone: no Kafka.

    .venv/bin/python -m pelotonctl.bench.job_manager              # 10 jobs of 1,000 tasks
    .venv/bin/python -m pelotonctl.bench.job_manager 20 500 50    # jobs, tasks per job, batch
    .venv/bin/python -m pelotonctl.bench.job_manager 500 10 10 1000  # ... and pools beside the job's

Admit is the largest stage's CPU in `pelotonctl bench`, and that bench's figure moves with
whatever else the shared machine runs. Here the stage's own work is timed alone, in CPU seconds:
each job is created, then its runs go through each step a pipeline reports for a run that waits
for neither admission nor hosts (LAUNCHING as a TaskProgress record, then TASK_STARTING,
TASK_RUNNING and TASK_FINISHED as TaskStatusRuns, as the host manager sends them), each step in
batches of 100 runs of the job (a pipeline's turns rarely hold a whole job's), as the runtime
hands them over (decoded from the messages a stage sends, outside the clock). The store is a real
SQLite file; what the stage emits is bundled and encoded as the runtime would, then dropped. Two
trees compare by running this one after the other, a few times each.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from peloton.config import Settings
from peloton.model.events import StatusRuns
from peloton.model.pool import parse_pool_config
from peloton.runtime import StaticView, decode_message
from peloton.serde import registry
from peloton.topics import Catalogue
from pelotonctl.bench.alone import POOL, CpuByStep, batches, dropped, host_state, pooled_store, records

JOB = """
name: bench
instancecount: {count}
defaultconfig:
  resource: {{cpulimit: 0.01, memlimitmb: 16}}
  command: {{shell: true, value: 'true'}}
"""
PROGRESS = ("LAUNCHING",)  # READY and PLACED come only for gangs that waited
STATUSES = ("TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED")
HOSTS = 97  # the hosts a job's runs are spread over


def bench_job_manager(jobs: int = 10, tasks_per_job: int = 1000, batch: int = 100, pools: int = 0) -> dict:
    """CPU microseconds per task of each step and in all, and the jobs' final states. Each step
    of a job comes in batches of `batch` runs (a pipeline's turns rarely hold a whole job's).
    `pools` more pools stand beside the jobs' own: a create reads the pool tree."""
    from stages.admit.stage import AdmitStage

    home = Path(tempfile.mkdtemp(prefix="peloton-jm-bench-"))
    try:
        catalogue = Catalogue()
        store = pooled_store(home)
        for i in range(pools):
            store.put_pool(f"/other{i}", parse_pool_config(POOL, f"/other{i}"))
        stage = AdmitStage(store, hosts=StaticView({f"h{i}": host_state(f"h{i}") for i in range(HOSTS)}))
        emitter = dropped(catalogue, "admit")
        stage.bind(emitter, Settings(), catalogue)
        # every partition of both inputs, as one instance holding them all (its rows remembered)
        stage.on_assign([(t, p) for t in ("job-commands", "task-status")
                         for p in range(catalogue["task-status"].partitions)])
        cpu = CpuByStep(emitter)

        def timed(step: str, given: list) -> None:
            cpu.timed(step, lambda: stage.handle(given))

        job_ids = [f"{uuid.uuid4()}" for _ in range(jobs)]
        for job_id in job_ids:
            command = {"command_id": uuid.uuid4().hex, "kind": "CREATE", "job_id": job_id, "pool": "/p",
                       "config": JOB.format(count=tasks_per_job), "requested_by": "bench", "timestamp_ms": 1}
            raw = registry().encode("peloton.JobCommand", command)
            timed("create", decode_message(registry(), catalogue["job-commands"], 0, 0, job_id.encode(), raw))
        for job_id in job_ids:
            hosts = [f"h{i % HOSTS}" for i in range(tasks_per_job)]
            parts = batches(tasks_per_job, batch)
            for state in PROGRESS:
                for part in parts:
                    runs = [{"instance": i, "run_id": 1, "host_id": "" if state == "READY" else hosts[i]} for i in part]
                    timed(state, records(catalogue, "task-status", job_id, "peloton.TaskProgress", [{
                        "event_id": uuid.uuid4().hex, "job_id": job_id, "state": state, "runs": runs,
                        "timestamp_ms": int(time.time() * 1000)}]))
            for state in STATUSES:
                for part in parts:
                    runs = StatusRuns()
                    for i in part:
                        runs.add(job_id, i, 1, hosts[i], state, int(time.time() * 1000),
                                 exit_code=0 if state == "TASK_FINISHED" else None,
                                 health="DISABLED" if state == "TASK_RUNNING" else "")
                    timed(state, records(catalogue, "task-status", job_id, "peloton.TaskStatusRuns",
                                         [r for _, r in runs.records]))
        states = sorted({store.get_job(j).state for j in job_ids})
        store.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {"jobs": jobs, "tasks_per_job": tasks_per_job, "batch": batch, "pools": pools,
            **cpu.per_task(jobs * tasks_per_job), "job_states": states}


def main() -> None:
    args = [int(a) for a in sys.argv[1:5]]
    r = bench_job_manager(*args)
    steps = ", ".join(f"{step} {us}" for step, us in r["cpu_us_per_task"].items())
    beside = f", beside {r['pools']:,} more pools" if r["pools"] else ""
    print(f"job manager alone, {r['jobs']} jobs of {r['tasks_per_job']:,} tasks, their steps in batches of "
          f"{r['batch']}{beside}: "
          f"{r['cpu_us_per_task_total']} us of CPU per task ({steps}); jobs {', '.join(r['job_states'])}")


if __name__ == "__main__":
    main()
