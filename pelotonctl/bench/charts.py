"""The benchmark page, drawn from a sweep's JSON (sweep.py): three charts (tasks per second against
hosts, latency percentiles, each stage's peak memory against tasks) and the page that shows them
with its table, the date, the machine and the tree.

    python -m pelotonctl.bench.charts [--results docs/benchmarks/results.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from peloton.config import REPO_ROOT

PAGE_DIR = REPO_ROOT / "docs" / "benchmarks"
STAGES = ("admit", "entitle", "place", "launch", "broker")


def _at_hosts(runs: list[dict], tasks: int) -> list[dict]:
    return sorted((r for r in runs if r["tasks"] == tasks), key=lambda r: r["hosts"])


def _at_tasks(runs: list[dict], hosts: int) -> list[dict]:
    return sorted((r for r in runs if r["hosts"] == hosts), key=lambda r: r["tasks"])


def draw(results: dict, out: Path) -> list[str]:
    """The three charts, as PNG files in `out`; their names."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    runs = results["runs"]
    by_hosts = _at_hosts(runs, 50_000)
    by_tasks = _at_tasks(runs, 10_000)
    hosts = [r["hosts"] for r in by_hosts]

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(hosts, [r["tasks_per_s_running"] for r in by_hosts], marker="o")
    ax.set_xscale("log")
    names = [_finish(fig, ax, out / "throughput-hosts.png", "simulated hosts", "tasks/s to RUNNING",
                     "50,000 tasks at once")]

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for q in ("p50", "p90", "p99"):
        ax.plot(hosts, [r[f"{q}_ms"] / 1000 for r in by_hosts], marker="o", label=q)
    ax.set_xscale("log")
    names.append(_finish(fig, ax, out / "latency-hosts.png", "simulated hosts", "submit -> RUNNING (s)",
                         "latency, 50,000 tasks at once", legend=True))

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for stage in STAGES:
        points = [(r["tasks"], mb) for r in by_tasks if (mb := _peak(r, stage)) is not None]
        if points:
            ax.plot([t for t, _ in points], [mb for _, mb in points], marker="o", label=stage)
    names.append(_finish(fig, ax, out / "memory-tasks.png", "tasks (jobs of 1,000, 10,000 hosts)",
                         "peak resident MB", "memory against tasks", legend=True))
    return names


def _peak(run: dict, component: str) -> float | None:
    return next((s["peak_mb"] for s in run.get("stages", []) if s["component"] == component), None)


def _finish(fig, ax, path: Path, xlabel: str, ylabel: str, title: str, legend: bool = False) -> str:
    """A chart's labels, its axis from 0 and its grid, saved as `path`: its file name."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    if legend:
        ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def page(results: dict) -> str:
    """docs/benchmarks/index.md: the charts, the table of every run, and what ran it."""
    m = results["machine"]
    rows = "\n".join(
        f"| {r['hosts']:,} | {r['tasks']:,} | {r['tasks_per_s_running']:,.0f} | {r['tasks_per_s_succeeded']:,.0f} | "
        f"{r['p50_ms'] / 1000:.2f} | {r['p99_ms'] / 1000:.2f} | {r['cpu_ms_per_task']:.3f} | "
        f"{max((s['peak_mb'] for s in r['stages'] if s['component'] in STAGES[:4]), default=0):,.0f} |"
        for r in sorted(results["runs"], key=lambda r: (r["tasks"], r["hosts"])))
    return f"""# Benchmarks

The pipeline on one machine, each run a throwaway stack (Apache Kafka, the four stages, a SQLite
store, simulated hosts), made by `make bench` (`python -m pelotonctl.bench.sweep`, then
`python -m pelotonctl.bench.charts` draws this page). Figures from other machines or trees are
not comparable to these; the dated runs of earlier trees are in [the history](history.md).

Run {results['date']} on tree `{results['tree']}`: {m['cpu'] or 'an unknown CPU'}, {m['cores']} cores,
{m['memory_gb']} GB, Linux {m['kernel']}, Python {m['python']}.

![tasks per second against hosts](throughput-hosts.png)
![latency percentiles against hosts](latency-hosts.png)
![peak memory against tasks](memory-tasks.png)

| hosts | tasks | tasks/s to RUNNING | tasks/s to SUCCEEDED | p50 s | p99 s | CPU ms/task | largest stage MB |
|---:|---:|---:|---:|---:|---:|---:|---:|
{rows}

Tasks/s to RUNNING counts from the first submission to the last task RUNNING; the latency is each
task's submission to its RUNNING; CPU per task is every stage's and the broker's CPU over the tasks
(it moves far less than tasks per second when other work shares the machine). `pelotonctl bench
--help` runs any one of these, and `pelotonctl bench --targets` the speed targets' runs.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=PAGE_DIR / "results.json")
    args = parser.parse_args()
    results = json.loads(args.results.read_text())
    out = args.results.parent
    names = draw(results, out)
    (out / "index.md").write_text(page(results))
    print(f"drew {', '.join(names)} and index.md in {out}")


if __name__ == "__main__":
    main()
