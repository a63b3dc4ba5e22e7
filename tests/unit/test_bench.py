"""The pipeline benchmark's own arithmetic: the plan's inventory and the latency percentiles."""

from __future__ import annotations

from pelotonctl.bench.pipeline import BENCH_HOST, BenchPlan, _percentile


def test_a_number_of_hosts_is_that_many_simulated_hosts_and_an_inventory_is_kept() -> None:
    assert BenchPlan(hosts="10000").inventory == f"sim:10000:{BENCH_HOST}"
    assert BenchPlan(hosts="simagent:50:cpu=8").inventory == "simagent:50:cpu=8"
    assert BenchPlan(jobs=50, tasks_per_job=1000).tasks == 50_000


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100
    assert (_percentile(values, 50), _percentile(values, 90), _percentile(values, 99)) == (50.0, 90.0, 99.0)
    assert _percentile([7], 99) == 7.0 and _percentile([], 50) == 0.0


def test_with_a_rate_jobs_are_due_at_that_steady_load_and_without_one_at_once() -> None:
    assert [BenchPlan(tasks_per_job=1000, rate=500).due_s(i) for i in range(3)] == [0.0, 2.0, 4.0]
    assert BenchPlan(tasks_per_job=1000).due_s(7) == 0.0
