"""pelotonctl bench: the pipeline's throughput and latency on a throwaway stack."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import typer

from pelotonctl.cli.common import EXIT_FAILED, EXIT_INVALID, JSON_HELP, check_store_kind, err, fail, out, print_json


def bench(
    hosts: str = typer.Option("10000", help="Simulated hosts: a number, or an inventory "
                              "(sim:50:cpu=64,mem_mb=262144 or simagent:2000:...)."),
    jobs: int = typer.Option(50, help="Batch jobs to submit."),
    tasks_per_job: int = typer.Option(1000, help="Tasks in each job."),
    pools: int = typer.Option(5, help="Resource pools the jobs are spread over (the cluster shared equally)."),
    instances: int = typer.Option(1, help="Instances of each stage."),
    task_seconds: float = typer.Option(0.0, help="How long each simulated task runs."),
    store: str = typer.Option("sqlite", help="sqlite; postgres (a throwaway PostgreSQL and ZooKeeper); or "
                              "cassandra (a throwaway Cassandra node and ZooKeeper)."),
    relay: int = typer.Option(100_000, help="Messages through the 4-hop relay baseline (0: none)."),
    rate: float = typer.Option(0.0, help="Offered load in tasks/s: jobs are submitted at this pace, for the "
                               "latency at a steady load (0: as fast as one producer can, for throughput)."),
    warmup: float = typer.Option(0.0, help="With --rate: the jobs of the first this many seconds are offered but "
                                 "left out of the latency percentiles (a stack just started is slow for about "
                                 "half a minute); their p99 is printed beside."),
    cpu_per_instance: float = typer.Option(0.0, help="Cap each stage instance at this share of a core (0.1: a "
                                           "tenth) in a cgroup of its own, so --instances 2 shows what a second "
                                           "instance adds when each has CPU of its own (root; 0: no cap)."),
    targets: bool = typer.Option(False, "--targets", help="Run the burst, then a steady load at 80% of its rate "
                                 "for 30 s of warm-up and a minute measured, then the burst on 1,000 and on 50,000 "
                                 "hosts, and print the figures beside the speed targets (make bench)."),
    baseline: str = typer.Option("", help="With --targets: a file of `pelotonctl bench --json` from an older tree "
                                 "run on this machine (2c424af for issue 27), the CPU target's measure."),
    against: str = typer.Option("", help="With --targets: a git revision (2c424af for issue 27) whose tree, made "
                                "once under .bench/ with its own venv, runs the burst in turn with this one; "
                                "the median pair's ratio of the stages' CPU is the CPU target's measure."),
    pairs: int = typer.Option(3, help="With --against: how many pairs of bursts."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Run JOBS jobs of TASKS_PER_JOB simulated tasks through a throwaway stack and print tasks per
    second to RUNNING and to SUCCEEDED, latency percentiles, per-stage records, CPU and memory, and
    the same broker's 4-hop relay rate for comparison. With --rate, the jobs arrive at that pace
    instead of all at once, and the percentiles tell the latency at that load. With --targets, four
    runs and a table of the figures the speed targets read."""
    from pelotonctl.bench.pipeline import BenchPlan, run_pipeline_bench

    check_store_kind(store)
    for name, value in (("--jobs", jobs), ("--tasks-per-job", tasks_per_job), ("--pools", pools),
                        ("--instances", instances)):
        if value < 1:
            fail(f"{name} {value}: must be at least 1", EXIT_INVALID)
    if rate < 0:
        fail(f"--rate {rate:g}: must be 0 or more", EXIT_INVALID)
    if warmup < 0 or (warmup and not rate):
        fail(f"--warmup {warmup:g}: must be 0 or more, and needs --rate (a burst has no steady state)", EXIT_INVALID)
    if (baseline or against) and not targets:
        fail(f"{'--baseline' if baseline else '--against'} is read by --targets only", EXIT_INVALID)
    if baseline and against:
        fail("--baseline or --against: one measure of the CPU target, not both", EXIT_INVALID)
    if pairs < 1:
        fail(f"--pairs {pairs}: must be at least 1", EXIT_INVALID)
    if cpu_per_instance and targets:
        fail("--targets runs its own capped runs (one instance of each stage, then two): leave "
             "--cpu-per-instance out", EXIT_INVALID)
    if cpu_per_instance:
        from pelotonctl.bench.cpu_cap import CpuCapError, CpuCaps

        try:
            CpuCaps.make(cpu_per_instance)
        except CpuCapError as exc:
            fail(f"--cpu-per-instance: {exc}", EXIT_INVALID)
    plan = BenchPlan(hosts=hosts, jobs=jobs, tasks_per_job=tasks_per_job, pools=pools, instances=instances,
                     task_seconds=task_seconds, store=store, relay_messages=relay, rate=rate,
                     cpu_per_instance=cpu_per_instance, warmup_s=warmup)
    from stages.launch.inventory import InventoryError, parse_inventory

    try:
        parse_inventory(plan.inventory, 4)
    except InventoryError as exc:
        fail(f"--hosts: {exc}", EXIT_INVALID)
    if targets:
        if rate:
            fail("--targets runs its own steady load: leave --rate out", EXIT_INVALID)
        from pelotonctl.bench.targets import baseline_cpu, run_targets

        base = None
        if baseline:
            try:
                base = json.loads(Path(baseline).read_text())
            except (OSError, ValueError) as exc:
                fail(f"--baseline {baseline}: {exc}", EXIT_INVALID)
            if baseline_cpu(base) is None:
                fail(f"--baseline {baseline}: not the --json of a pelotonctl bench run (no stages' CPU in it)",
                     EXIT_INVALID)
        compared = None
        if against:
            from pelotonctl.bench.against import AgainstError, UnknownRevision, run_pairs

            try:
                compared = run_pairs(err if as_json else out, against, pairs, plan)
            except UnknownRevision as exc:
                fail(str(exc), EXIT_INVALID)
            except (AgainstError, OSError, subprocess.SubprocessError) as exc:
                fail(str(exc), EXIT_FAILED)
        report = run_targets(err if as_json else out, plan, base, compared)
        if as_json:
            print_json(report)
        if not report["summary"]["all_succeeded"]:
            raise typer.Exit(EXIT_FAILED)
        return
    from pelotonctl.bench.cpu_cap import CpuCapError

    try:
        figures = run_pipeline_bench(err if as_json else out, plan)
    except CpuCapError as exc:  # checked above; a group the kernel refuses later still says why
        fail(str(exc), EXIT_FAILED)
    if as_json:
        print_json(figures)
    if set(figures["job_states"]) != {"SUCCEEDED"}:
        raise typer.Exit(EXIT_FAILED)
