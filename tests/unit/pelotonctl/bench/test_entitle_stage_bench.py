"""The entitle stage's benchmark admits every gang and releases every run (small sizes: the
figures come from running it by hand, see pelotonctl/bench/entitle_stage.py)."""

from __future__ import annotations

from pelotonctl.bench.entitle_stage import STEPS, bench_entitle_stage


def test_the_benchmark_admits_every_gang_and_reports_its_cpu_per_step() -> None:
    result = bench_entitle_stage(jobs=2, gangs_per_job=30, batch=10)
    assert result["gangs_admitted"] == 60
    assert list(result["cpu_us_per_task"]) == list(STEPS)
    assert all(us > 0 for us in result["cpu_us_per_task"].values())
