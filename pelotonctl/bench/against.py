"""`pelotonctl bench --targets --against REV`: the CPU target's measure, taken the way a shared
machine allows. This tree and an older one (a git worktree of REV with its own venv, under .bench/)
run the same burst in turn, pair after pair, and each pair's ratio of the stages' CPU per task is
read. One baseline run can land in a busy minute of the machine (one did: 0.956 ms against 0.621
a minute later); the two runs of a pair share the machine's mood, and the median pair stands."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from peloton.config import REPO_ROOT
from pelotonctl.bench.pipeline import BenchPlan
from pelotonctl.bench.targets import stage_cpu

TREES = REPO_ROOT / ".bench"  # worktrees of older revisions (ignored by git)
INSTALL_TIMEOUT_S = 900.0
RUN_TIMEOUT_S = 1800.0


class AgainstError(RuntimeError):
    """The older tree could not be made or run: the message says why."""


class UnknownRevision(AgainstError):
    """No such revision here, or no git clone to find it in."""


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise AgainstError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def old_tree(rev: str) -> Path:
    """A worktree of `rev` with its own venv (`make install` there), made once and kept; the
    fetched jars are this tree's."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        raise UnknownRevision(f"--against {rev}: needs a git clone of the project (found none at {REPO_ROOT})")
    try:
        commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    except AgainstError as exc:
        raise UnknownRevision(f"--against {rev}: no such commit here (a shallow clone? `git fetch --unshallow`): "
                              f"{exc}") from None
    tree = TREES / commit[:12]
    if not (tree / ".git").exists():
        TREES.mkdir(exist_ok=True)
        _git("worktree", "prune")
        _git("worktree", "add", "--detach", str(tree), commit)
    jars = REPO_ROOT / ".jars"
    if jars.exists() and not (tree / ".jars").exists():
        (tree / ".jars").symlink_to(jars)
    if not (tree / ".venv" / "bin" / "pelotonctl").exists():
        done = subprocess.run(["make", "-C", str(tree), "install"], capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_S)
        if done.returncode != 0:
            raise AgainstError(f"`make install` in {tree} failed: {done.stderr.strip()[-2000:]}")
    return tree


def _burst_args(plan: BenchPlan) -> list[str]:
    """The burst as both trees' `bench` take it (options 2c424af already had)."""
    return ["bench", "--hosts", plan.hosts, "--jobs", str(plan.jobs), "--tasks-per-job", str(plan.tasks_per_job),
            "--pools", str(plan.pools), "--relay", "0", "--json"]


def _run(command: list[str], cwd: Path) -> dict:
    """A burst's figures; a run whose jobs did not all succeed measured something else."""
    done = subprocess.run(command, cwd=str(cwd), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    try:
        figures = json.loads(done.stdout)
    except ValueError:
        raise AgainstError(f"`{' '.join(command)}` in {cwd} (exit {done.returncode}) printed no figures: "
                           f"{done.stderr.strip()[-2000:]}") from None
    if set(figures.get("job_states", {})) != {"SUCCEEDED"}:
        raise AgainstError(f"`{' '.join(command)}` in {cwd}: its jobs ended {figures.get('job_states')}, "
                           "not all SUCCEEDED")
    return figures


def run_pairs(console, rev: str, pairs: int, plan: BenchPlan) -> dict:
    """`pairs` bursts of this tree and of `rev`'s, alternating (this tree first): each run's
    stages' CPU per task, each pair's ratio, and the median ratio."""
    tree = old_tree(rev)
    console.print(f"CPU against {rev} ({tree}): {pairs} pairs of bursts, this tree then that one", highlight=False)
    runs = []
    for i in range(pairs):
        ours = stage_cpu(_run([sys.executable, "-m", "pelotonctl", *_burst_args(plan)], REPO_ROOT))
        theirs = stage_cpu(_run([str(tree / ".venv" / "bin" / "pelotonctl"), *_burst_args(plan)], tree))
        ratio = round(ours["stages"] / theirs["stages"], 3) if theirs["stages"] else None
        runs.append({"ours": ours, "theirs": theirs, "ratio": ratio})
        console.print(f"  pair {i + 1}: stages {ours['stages']:.3f} ms against {theirs['stages']:.3f} ms a task"
                      + (f", {ratio:.3f} of it" if ratio is not None else ""), highlight=False)
    return summarize(rev, runs)


def summarize(rev: str, runs: list[dict]) -> dict:
    """The pairs' medians: each side's stages' CPU per task, and the ratio of the median pair."""
    ratios = [r["ratio"] for r in runs if r["ratio"] is not None]
    return {"rev": rev, "pairs": runs,
            "ours_stage_cpu_ms_per_task": round(statistics.median(r["ours"]["stages"] for r in runs), 4),
            "baseline_stage_cpu_ms_per_task": round(statistics.median(r["theirs"]["stages"] for r in runs), 4),
            "ratio": round(statistics.median(ratios), 3) if ratios else None}
