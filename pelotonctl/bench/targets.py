"""`pelotonctl bench --targets` (in `make bench`): the runs issue 27's targets are read from, one
after the other on one machine, and the figures each target compares.

- burst: the plan as given, every job at once, beside the relay: tasks/s to RUNNING and its ratio
  to the relay, CPU per task per stage;
- steady: the same jobs offered at 80 % of the burst's own rate for about a minute: p99 submit to
  RUNNING;
- flat: the burst again on 1,000 and on 50,000 hosts: how much the rate falls between them;
- scale: one instance of each stage, then two, each instance capped at a tenth of a core in a
  cgroup of its own (cpu_cap.py), so that a second instance has CPU of its own as it would on
  another machine: how much throughput it adds (skipped where no cgroup can be written).

The targets are ratios taken within these runs, because absolute rates move between these shared
machines; the CPU target is read against an older tree's figures run the same way (docs/benchmarks)."""

from __future__ import annotations

import math
from dataclasses import replace

from pelotonctl.bench.cpu_cap import find_controller
from pelotonctl.bench.pipeline import STAGES, BenchPlan, run_pipeline_bench

STEADY_SHARE = 0.8  # the steady run's offered load, as a share of the burst's rate
STEADY_SECONDS = 60.0
# ... after this long at the same load, not counted (BenchPlan.warmup_s): the minute measured is
# the stack's steady state, not its start.
STEADY_WARMUP_S = 30.0
FLAT_HOSTS = ("1000", "50000")
# The scale runs: each stage instance capped at SCALE_CPU of a core, SCALE_POOLS pools (two per
# partition of the pool-keyed topics, so two instances of entitle and place get four each),
# SCALE_JOBS jobs of the burst's size.
SCALE_CPU = 0.1
SCALE_POOLS = 8
SCALE_JOBS = 20

# issue 27's targets, as figures to print beside what was measured
RATIO_TARGET = 0.1
STEADY_P99_TARGET_S = 1.0
FLAT_FALL_TARGET = 0.10
CPU_SHARE_TARGET = 1 / 3  # of the baseline tree's stages' CPU per task (2c424af)
# "A second instance of each stage should add throughput, not only survive": read as most of its
# CPU turned into tasks (two instances at least 1.5 times one's rate).
SCALE_GAIN_TARGET = 1.5


def steady_plan(burst: BenchPlan, burst_rate: float) -> BenchPlan:
    """The burst's jobs offered at STEADY_SHARE of its rate, enough of them for STEADY_WARMUP_S and
    then STEADY_SECONDS."""
    rate = max(1.0, STEADY_SHARE * burst_rate)
    warmup = math.ceil(rate * STEADY_WARMUP_S / burst.tasks_per_job)
    jobs = warmup + max(2, math.ceil(rate * STEADY_SECONDS / burst.tasks_per_job))
    return replace(burst, rate=round(rate), jobs=jobs, relay_messages=0, warmup_s=STEADY_WARMUP_S)


def scale_plan(burst: BenchPlan, instances: int) -> BenchPlan:
    """A scale run: `instances` of each stage, each capped at SCALE_CPU of a core."""
    return replace(burst, instances=instances, cpu_per_instance=SCALE_CPU, pools=SCALE_POOLS, jobs=SCALE_JOBS,
                   relay_messages=0)


def rate_fall(rates: dict[str, float]) -> float | None:
    """How much the rate falls from the fewest hosts to the most, as a share of the first."""
    first, last = rates.get(FLAT_HOSTS[0]), rates.get(FLAT_HOSTS[-1])
    if not first or last is None:
        return None
    return round((first - last) / first, 3)


def stage_cpu(figures: dict) -> dict[str, float]:
    """CPU ms per task of each stage, and of the stages together (the broker apart)."""
    per = {r["component"]: r["cpu_ms_per_task"] for r in figures["stages"] if r["component"] in STAGES}
    per["stages"] = round(sum(per.values()), 3)
    return per


def baseline_cpu(figures: dict) -> float | None:
    """The stages' CPU per task of a baseline run: `pelotonctl bench --json` of an older tree, or
    this command's own --json (its burst run)."""
    run = figures.get("runs", {}).get("burst", figures)
    try:
        return stage_cpu(run)["stages"]
    except (KeyError, TypeError):
        return None


def run_targets(console, burst: BenchPlan, baseline: dict | None = None, against: dict | None = None) -> dict:
    """The runs (burst, steady, flat and, where instances can be capped, scale), then the table
    of targets. The CPU target's measure: `against`, pairs of
    bursts alternating with an older tree (pelotonctl/bench/against.py), or else `baseline`, a
    bench's --json of an older tree run on the same machine."""
    runs = {"burst": run_pipeline_bench(console, burst)}
    runs["steady"] = run_pipeline_bench(console, steady_plan(burst, runs["burst"]["tasks_per_s_running"]))
    flat: dict[str, float] = {}
    for hosts in FLAT_HOSTS:
        key = f"hosts_{hosts}"
        runs[key] = runs["burst"] if hosts == burst.hosts else \
            run_pipeline_bench(console, replace(burst, hosts=hosts, relay_messages=0))
        flat[hosts] = runs[key]["tasks_per_s_running"]
    scale: dict[str, float] = {}
    if find_controller() is not None:
        for instances in (1, 2):
            runs[f"scale_{instances}"] = run_pipeline_bench(console, scale_plan(burst, instances))
            scale[str(instances)] = runs[f"scale_{instances}"]["tasks_per_s_running"]
    else:
        console.print("scale runs skipped: no writable cgroup cpu controller here (root is needed) to give "
                      "each instance a CPU share of its own", highlight=False)
    peak = {}
    for run in runs.values():
        for r in run["stages"]:
            peak[r["component"]] = max(peak.get(r["component"], 0.0), r["peak_mb"])
    summary = {
        "burst_tasks_per_s": runs["burst"]["tasks_per_s_running"],
        "relay_msgs_per_s": runs["burst"]["relay_msgs_per_s"],
        "ratio": runs["burst"]["ratio"],
        "stage_cpu_ms_per_task": stage_cpu(runs["burst"]),
        "steady_offered_tasks_per_s": runs["steady"]["offered_tasks_per_s"],
        "steady_tasks_per_s": runs["steady"]["tasks_per_s_running"],
        "steady_p99_s": runs["steady"]["p99_ms"] / 1000,
        "steady_p99_s_with_warmup": (runs["steady"].get("p99_ms_with_warmup") or runs["steady"]["p99_ms"]) / 1000,
        "flat_tasks_per_s": flat,
        "flat_fall": rate_fall(flat),
        "peak_mb": peak,
        "scale_tasks_per_s": scale,
        "scale_gain": round(scale["2"] / scale["1"], 2) if scale.get("1") else None,
        "baseline_stage_cpu_ms_per_task": baseline_cpu(baseline) if baseline else None,
        "cpu_share": None,  # the stages' CPU per task as a share of the baseline's
        "cpu_against": against,
        "all_succeeded": all(set(r["job_states"]) == {"SUCCEEDED"} for r in runs.values()),
    }
    if against and against.get("ratio") is not None:
        summary["baseline_stage_cpu_ms_per_task"] = against["baseline_stage_cpu_ms_per_task"]
        summary["cpu_share"] = against["ratio"]
    elif summary["baseline_stage_cpu_ms_per_task"]:
        summary["cpu_share"] = round(summary["stage_cpu_ms_per_task"]["stages"]
                                     / summary["baseline_stage_cpu_ms_per_task"], 3)
    _print(console, summary)
    return {"summary": summary, "runs": runs}


def _print(console, s: dict) -> None:
    from rich.table import Table

    def met(ok: bool | None) -> str:
        return "" if ok is None else ("met" if ok else "not met")

    cpu = s["stage_cpu_ms_per_task"]
    table = Table("figure", "measured", "target", "")
    ratio = s["ratio"]
    table.add_row("burst to RUNNING", f"{s['burst_tasks_per_s']:,.0f} tasks/s", "", "")
    table.add_row("relay (same broker)", f"{s['relay_msgs_per_s']:,.0f} msgs/s", "", "")
    table.add_row("ratio to the relay", "" if ratio is None else f"{ratio:.3f}", f">= {RATIO_TARGET}",
                  met(None if ratio is None else ratio >= RATIO_TARGET))
    base, share, against = s["baseline_stage_cpu_ms_per_task"], s["cpu_share"], s["cpu_against"]
    if against and share is not None:
        measure = (f"; {len(against['pairs'])} pairs alternating with {against['rev']}: median {share:.2f} of "
                   f"its {base:.3f}")
    else:
        measure = f", {share:.2f} of the baseline's {base:.3f}" if share is not None else ""
    table.add_row("stages' CPU per task", f"{cpu['stages']:.3f} ms ("
                  + ", ".join(f"{name} {cpu[name]:.3f}" for name in STAGES if name in cpu) + ")" + measure,
                  f"<= {CPU_SHARE_TARGET:.2f} of the baseline's" if share is not None
                  else "a third of 2c424af's (--against or --baseline)",
                  met(share <= CPU_SHARE_TARGET) if share is not None else "")
    table.add_row(f"steady at {STEADY_SHARE:.0%} of the burst", f"{s['steady_tasks_per_s']:,.0f} tasks/s "
                  f"({s['steady_offered_tasks_per_s']:,.0f} offered), p99 {s['steady_p99_s']:.2f} s after "
                  f"{STEADY_WARMUP_S:g} s at that load (p99 {s['steady_p99_s_with_warmup']:.2f} s with them)",
                  f"p99 < {STEADY_P99_TARGET_S:g} s", met(s["steady_p99_s"] < STEADY_P99_TARGET_S))
    fall = s["flat_fall"]
    table.add_row(f"{int(FLAT_HOSTS[0]):,} -> {int(FLAT_HOSTS[-1]):,} hosts",
                  " -> ".join(f"{r:,.0f}" for r in s["flat_tasks_per_s"].values()) + " tasks/s"
                  + ("" if fall is None else f" (falls {fall:.0%})" if fall > 0 else f" (rises {-fall:.0%})"),
                  f"falls <= {FLAT_FALL_TARGET:.0%}", met(None if fall is None else fall <= FLAT_FALL_TARGET))
    gain = s.get("scale_gain")
    table.add_row(f"1 -> 2 instances of each stage, each capped at {SCALE_CPU:g} of a core",
                  " -> ".join(f"{r:,.0f}" for r in s["scale_tasks_per_s"].values()) + f" tasks/s (x{gain:.2f})"
                  if gain is not None else "not measured (no cgroup to cap them in)",
                  f"x{SCALE_GAIN_TARGET:g} or more", met(None if gain is None else gain >= SCALE_GAIN_TARGET))
    table.add_row("peak memory", ", ".join(f"{name} {mb:,.0f}" for name, mb in s["peak_mb"].items()) + " MB",
                  "< 2,048 MB each", met(max(s["peak_mb"].values(), default=0) < 2048))
    console.print("targets (issue 27), from the runs above:", highlight=False)
    console.print(table)
