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


def test_the_steady_run_offers_four_fifths_of_the_burst_rate_for_a_minute_without_a_relay() -> None:
    from pelotonctl.bench.targets import steady_plan

    steady = steady_plan(BenchPlan(jobs=50, tasks_per_job=1000), 3000.0)
    assert (steady.rate, steady.jobs, steady.relay_messages, steady.tasks_per_job) == (2400, 144, 0, 1000)
    assert steady_plan(BenchPlan(tasks_per_job=1000), 10.0).jobs == 2  # a slow machine still gets a load


def test_the_flat_target_reads_the_fall_from_the_fewest_hosts_to_the_most() -> None:
    from pelotonctl.bench.targets import rate_fall, stage_cpu

    assert rate_fall({"1000": 3000.0, "50000": 2700.0}) == 0.1
    assert rate_fall({"1000": 3000.0, "50000": 3300.0}) == -0.1  # a rise is no fall
    assert rate_fall({"1000": 0.0, "50000": 10.0}) is None
    runs = {"stages": [{"component": "admit", "cpu_ms_per_task": 0.2}, {"component": "place", "cpu_ms_per_task": 0.1},
                       {"component": "broker", "cpu_ms_per_task": 0.5}]}
    assert stage_cpu(runs) == {"admit": 0.2, "place": 0.1, "stages": 0.3}


def test_the_cpu_target_reads_its_baseline_from_a_bench_run_or_a_targets_run() -> None:
    from pelotonctl.bench.targets import baseline_cpu

    run = {"stages": [{"component": "admit", "cpu_ms_per_task": 0.2}, {"component": "launch", "cpu_ms_per_task": 0.1},
                      {"component": "broker", "cpu_ms_per_task": 0.9}]}
    assert baseline_cpu(run) == 0.3 and baseline_cpu({"summary": {}, "runs": {"burst": run}}) == 0.3
    assert baseline_cpu({"tasks": 5}) is None and baseline_cpu({"runs": {"burst": None}}) is None


def test_against_an_older_tree_the_median_pair_decides() -> None:
    from pelotonctl.bench.against import summarize

    def pair(ours: float, theirs: float) -> dict:
        return {"ours": {"stages": ours}, "theirs": {"stages": theirs}, "ratio": round(ours / theirs, 3)}

    # the middle pair stands; a busy minute on either side (the last pair) moves nothing
    s = summarize("2c424af", [pair(0.26, 0.60), pair(0.25, 0.61), pair(0.26, 0.96)])
    assert (s["ratio"], s["ours_stage_cpu_ms_per_task"], s["baseline_stage_cpu_ms_per_task"]) == (0.41, 0.26, 0.61)
    assert summarize("x", [{"ours": {"stages": 0.2}, "theirs": {"stages": 0.0}, "ratio": None}])["ratio"] is None
