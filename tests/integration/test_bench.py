"""`pelotonctl bench` end to end, small: a throwaway stack, the relay baseline, the figures as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from peloton.config import REPO_ROOT

# About 40 s (a stack up and down, the relay's groups joining): in `make soak` with the scale runs.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_benchmark_prints_every_figure_it_promises(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PELOTON_")}
    env.update(PELOTON_HOME=str(tmp_path), PELOTON_SESSION_TIMEOUT_MS="2000")
    done = subprocess.run([sys.executable, "-m", "pelotonctl", "bench", "--hosts", "20", "--jobs", "3",
                           "--tasks-per-job", "40", "--pools", "2", "--relay", "2000", "--rate", "400",
                           "--json"],
                          env=env, cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    assert figures["job_states"] == {"SUCCEEDED": 3}
    assert figures["tasks_running"] == figures["tasks_succeeded"] == 120
    for key in ("tasks_per_s_running", "tasks_per_s_succeeded", "p50_ms", "p90_ms", "p99_ms", "relay_msgs_per_s",
                "ratio"):
        assert figures[key] > 0, key
    assert figures["p50_ms"] <= figures["p90_ms"] <= figures["p99_ms"]
    assert [r["component"] for r in figures["stages"]] == ["admit", "entitle", "place", "launch", "broker"]
    assert all(r["cpu_seconds"] >= 0 and r["cpu_ms_per_task"] >= 0 and r["peak_mb"] > 0 for r in figures["stages"])
    assert figures["cpu_ms_per_task"] > 0
    assert all(r["records_per_s"] > 0 for r in figures["stages"][:4])
    assert "to RUNNING" in done.stderr  # the table goes to stderr with --json
    assert figures["offered_tasks_per_s"] == 400 and "offered load: 400 tasks/s" in done.stderr
    bad = subprocess.run([sys.executable, "-m", "pelotonctl", "bench", "--jobs", "0"], env=env, cwd=str(REPO_ROOT),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--jobs 0" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "pelotonctl", "bench", "--rate", "-1"], env=env, cwd=str(REPO_ROOT),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--rate -1" in bad.stderr
