"""The benchmark page's runs: the pipeline bench over a few sizes, on this machine, written as
one JSON file that docs/benchmarks is drawn from (pelotonctl/bench/charts.py).

    python -m pelotonctl.bench.sweep [--out docs/benchmarks/results.json] [--quick]

- hosts: the burst (50 jobs of 1,000 tasks at once) on 1,000, 10,000 and 50,000 simulated hosts:
  tasks per second to RUNNING against the cluster's size.
- tasks: the burst on 10,000 hosts with 10,000, 50,000 and 100,000 tasks: each stage's peak memory
  against the tasks in flight (the 50,000 run is the hosts sweep's own).
- latency: submit -> RUNNING percentiles of every run.
Each run is a throwaway stack (pipeline.py); the file says when, where and on which tree."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

from rich.console import Console

from peloton.config import REPO_ROOT
from pelotonctl.bench.pipeline import BenchPlan, run_pipeline_bench

OUT = REPO_ROOT / "docs" / "benchmarks" / "results.json"
HOSTS = (1_000, 10_000, 50_000)
TASKS = (10_000, 50_000, 100_000)  # at 10,000 hosts, in jobs of 1,000


def machine() -> dict:
    """What ran it: enough to tell two machines apart on the page."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal"))
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    return {"cpu": model, "cores": os.cpu_count(), "memory_gb": round(mem_kb / 1024 / 1024, 1),
            "kernel": platform.release(), "python": platform.python_version()}


def tree() -> str:
    """The commit the runs were made on, with + when the tree had changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    return git("rev-parse", "--short", "HEAD") + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")


def sweep(console: Console, quick: bool = False) -> dict:
    hosts = HOSTS[:2] if quick else HOSTS
    tasks = TASKS[:2] if quick else TASKS
    runs = []
    plans = [BenchPlan(hosts=str(h), relay_messages=0) for h in hosts]
    plans += [BenchPlan(hosts="10000", jobs=t // 1000, relay_messages=0) for t in tasks if t != 50_000]
    for plan in plans:
        console.print(f"[bold]sweep[/bold]: {plan.tasks:,} tasks on {plan.hosts} hosts", highlight=False)
        figures = run_pipeline_bench(console, plan)
        runs.append({"hosts": int(plan.hosts), **{k: v for k, v in figures.items() if k != "hosts"}})
    return {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), "tree": tree(),
            "machine": machine(), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--quick", action="store_true", help="two sizes of each sweep (a check, not the page's)")
    args = parser.parse_args()
    result = sweep(Console(), args.quick)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}: {len(result['runs'])} runs")


if __name__ == "__main__":
    main()
