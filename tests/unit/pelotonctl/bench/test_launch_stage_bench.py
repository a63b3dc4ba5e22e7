"""The launch stage's benchmark launches every run and ends it (small sizes: the figures come from
running it by hand, see pelotonctl/bench/launch_stage.py)."""

from __future__ import annotations

from pelotonctl.bench.launch_stage import STEPS, bench_launch_stage


def test_the_benchmark_launches_and_ends_every_run_and_reports_its_cpu_per_step() -> None:
    result = bench_launch_stage(jobs=2, gangs_per_job=30, batch=10, per_host=4)
    assert result["launched"] == 60 and result["still_running"] == 0
    assert list(result["cpu_us_per_task"]) == list(STEPS)
    assert all(us > 0 for us in result["cpu_us_per_task"].values())
