"""The job manager's benchmark runs every job to SUCCEEDED through each step (small sizes: the
figures come from running it by hand, see pelotonctl/bench/job_manager.py)."""

from __future__ import annotations

from pelotonctl.bench.job_manager import PROGRESS, STATUSES, bench_job_manager


def test_the_benchmark_takes_every_job_through_each_step_and_reports_its_cpu() -> None:
    result = bench_job_manager(jobs=3, tasks_per_job=40)
    assert result["job_states"] == ["SUCCEEDED"]
    assert list(result["cpu_us_per_task"]) == ["create", *PROGRESS, *STATUSES]
    assert all(us > 0 for us in result["cpu_us_per_task"].values())
    assert result["cpu_us_per_task_total"] >= sum(result["cpu_us_per_task"].values()) - 1
