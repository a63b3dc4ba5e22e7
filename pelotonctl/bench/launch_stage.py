"""How much CPU the launch stage (the host manager) spends per task, the stage alone: no Kafka.

    .venv/bin/python -m pelotonctl.bench.launch_stage               # 10 jobs of 1,000 one-task gangs
    .venv/bin/python -m pelotonctl.bench.launch_stage 20 500 50 1   # jobs, gangs per job, batch, per host

As the job manager's and entitle's benches do (pelotonctl/bench/alone.py): the stage's own work in
CPU seconds, on a real SQLite file, with its input as the runtime hands it over. Each job's
one-task gangs arrive as Placement records on the simulated hosts, in batches of `batch` (each run
claimed, LAUNCHING sent, the run started on the simulated driver), and a tick follows each batch.
A job's runs go `per_host` to a host, as place's PACK_HOST fills a host before the next (1 spreads
them: every run then changes a host's state twice, at its start and its end). The simulated runs
take no time: the tick after their launch finds each at TASK_STARTING, TASK_RUNNING and
TASK_FINISHED, sends the three (a TaskStatusRuns record each for the batch's runs of a job) and
ends its launch in the store. The host states the stage publishes after each turn are counted
where they are sent.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from peloton.config import Settings
from peloton.store import open_store
from peloton.topics import Catalogue, partition_for
from pelotonctl.bench.alone import CpuByStep, batches, dropped, launch_spec, records

HOSTS = 1000
STEPS = ("placement", "tick")


def bench_launch_stage(jobs: int = 10, gangs_per_job: int = 1000, batch: int = 100, per_host: int = 20) -> dict:
    """CPU microseconds per task of each step and in all, and how many runs were launched and
    ended."""
    from stages.launch.stage import LaunchStage

    home = Path(tempfile.mkdtemp(prefix="peloton-launch-bench-"))
    try:
        catalogue = Catalogue()
        shards = catalogue["placements"].partitions
        store = open_store(home / "peloton.db")
        stage = LaunchStage(store)
        emitter = dropped(catalogue, "launch")
        stage.bind(emitter, Settings(home=home, hosts=f"sim:{HOSTS}:cpu=64,mem_mb=262144", sim_task_seconds=0),
                   catalogue)
        stage.on_assign([("placements", p) for p in range(shards)])
        emitter.send()
        cpu = CpuByStep(emitter)
        timed = cpu.timed
        hosts = [f"sim-{i}" for i in range(HOSTS)]
        for _ in range(jobs):
            job_id = str(uuid.uuid4())
            for part in batches(gangs_per_job, batch):
                # one placement per gang, on the shard of its host, as place sends them
                by_shard: dict[int, list[dict]] = {}
                for i in part:
                    host_id = hosts[(i // per_host) % HOSTS]
                    by_shard.setdefault(partition_for(host_id, shards), []).append({
                        "placement_id": uuid.uuid4().hex, "gang_id": f"{job_id}-{i}-1", "pool": "/p",
                        "shard": partition_for(host_id, shards), "placed_ms": 1,
                        "assignments": [{"host_id": host_id, "task": launch_spec(job_id, i), "ports": {}}]})
                placements = [r for shard, values in sorted(by_shard.items())
                              for r in records(catalogue, "placements", str(shard), "peloton.Placement", values)]
                timed("placement", lambda placements=placements: stage.handle(placements))
                timed("tick", lambda: stage.tick(time.monotonic()))
        launched, running = stage.launched, len(stage.running)
        store.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {"jobs": jobs, "gangs_per_job": gangs_per_job, "batch": batch, "per_host": per_host, "launched": launched,
            "still_running": running, **cpu.per_task(jobs * gangs_per_job)}


def main() -> None:
    args = [int(a) for a in sys.argv[1:5]]
    r = bench_launch_stage(*args)
    steps = ", ".join(f"{step} {us}" for step, us in r["cpu_us_per_task"].items())
    print(f"launch alone, {r['jobs']} jobs of {r['gangs_per_job']:,} one-task gangs placed in batches of {r['batch']} "
          f"on {HOSTS:,} simulated hosts, {r['per_host']} to a host: {r['cpu_us_per_task_total']} us of CPU per task "
          f"({steps}); "
          f"{r['launched']:,} runs launched, {r['still_running']} still running")


if __name__ == "__main__":
    main()
