"""The pipeline benchmark's own arithmetic: the plan's inventory and the latency percentiles."""

from __future__ import annotations

import pytest

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


def test_the_steady_run_offers_four_fifths_of_the_burst_rate_for_a_minute_after_a_warmup_without_a_relay() -> None:
    from pelotonctl.bench.targets import steady_plan

    steady = steady_plan(BenchPlan(jobs=50, tasks_per_job=1000), 3000.0)
    # 30 s of warm-up (72 jobs), then the minute measured (144)
    assert (steady.rate, steady.jobs, steady.relay_messages, steady.tasks_per_job, steady.warmup_s) == \
        (2400, 216, 0, 1000, 30.0)
    assert [steady.warming(i) for i in (0, 71, 72, 215)] == [True, True, False, False]
    assert steady_plan(BenchPlan(tasks_per_job=1000), 10.0).jobs == 3  # a slow machine still gets a load
    assert not BenchPlan(warmup_s=30.0).warming(0)  # a burst (no rate) has no warm-up


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


def test_bench_pools_spread_evenly_over_the_pool_keyed_partitions() -> None:
    from peloton.topics import partition_for
    from pelotonctl.bench.pipeline import pool_names

    for count, partitions in ((5, 4), (8, 4), (12, 4), (3, 8)):
        names = pool_names(count, partitions)
        per = [0] * partitions
        for name in names:
            per[partition_for(name, partitions)] += 1
        assert len(set(names)) == count and max(per) - min(per) <= 1, (count, partitions, per)
    assert pool_names(5, 4)[0] == "/bench-0"


def test_a_cpu_quota_is_written_as_each_cgroup_version_reads_it(tmp_path) -> None:
    from pelotonctl.bench.cpu_cap import Controller, CpuCapError, CpuCaps, find_controller

    assert Controller("v1", tmp_path).quota_files(0.25) == {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "25000"}
    assert Controller("v2", tmp_path).quota_files(1.5) == {"cpu.max": "150000 100000"}
    assert Controller("v2", tmp_path).quota_files(0.001) == {"cpu.max": "1000 100000"}  # the kernel's least
    # a v1 hierarchy (cpu, or cpu joined with cpuacct) is found before a v2 one
    (tmp_path / "cpu,cpuacct").mkdir()
    (tmp_path / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1")
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory")
    assert find_controller(tmp_path) == Controller("v1", tmp_path / "cpu,cpuacct")
    (tmp_path / "cpu,cpuacct" / "cpu.cfs_quota_us").unlink()
    assert find_controller(tmp_path) == Controller("v2", tmp_path)
    (tmp_path / "cgroup.controllers").write_text("cpuset io memory")
    assert find_controller(tmp_path) is None
    with pytest.raises(CpuCapError, match="no writable cgroup cpu controller"):
        CpuCaps.make(0.1, tmp_path)
    with pytest.raises(CpuCapError, match="above 0"):
        CpuCaps.make(0, tmp_path)


def test_the_scale_runs_cap_each_instance_and_the_targets_table_reads_their_gain() -> None:
    from rich.console import Console

    from pelotonctl.bench import targets

    plan = targets.scale_plan(BenchPlan(jobs=50, tasks_per_job=1000), 2)
    assert (plan.instances, plan.cpu_per_instance, plan.pools, plan.jobs, plan.relay_messages) == (2, 0.1, 8, 20, 0)
    summary = {"burst_tasks_per_s": 5000.0, "relay_msgs_per_s": 30000.0, "ratio": 0.167,
               "stage_cpu_ms_per_task": {"admit": 0.08, "entitle": 0.05, "place": 0.05, "launch": 0.06, "stages": 0.24},
               "steady_offered_tasks_per_s": 4000, "steady_tasks_per_s": 3990.0, "steady_p99_s": 0.9,
               "steady_p99_s_with_warmup": 1.4,
               "flat_tasks_per_s": {"1000": 5000.0, "50000": 4900.0}, "flat_fall": 0.02, "peak_mb": {"broker": 600.0},
               "baseline_stage_cpu_ms_per_task": None, "cpu_share": None, "cpu_against": None,
               "scale_tasks_per_s": {"1": 450.0, "2": 1000.0}, "scale_gain": 2.22}
    for scale, gain, said in (({"1": 450.0, "2": 1000.0}, 2.22, "450 -> 1,000 tasks/s (x2.22)"),
                              ({}, None, "not measured (no cgroup to cap them in)")):
        console = Console(record=True, width=250)
        targets._print(console, {**summary, "scale_tasks_per_s": scale, "scale_gain": gain})
        text = console.export_text()
        row = next(line for line in text.splitlines() if "1 -> 2 instances" in line)
        assert said in row and ("met" in row) == (gain is not None), row
        steady = next(line for line in text.splitlines() if "steady at 80%" in line)
        assert "p99 0.90 s after 30 s at that load (p99 1.40 s with them)" in steady, steady


def test_a_group_counts_as_settled_only_stable_with_every_instance_holding_a_partition() -> None:
    from pelotonctl.bench.pipeline import settled

    two = {"state": "STABLE", "client_ids": ["launch-0", "launch-1"], "partitions": {"launch-0": 2, "launch-1": 2}}
    assert settled(two, 2)
    assert not settled({**two, "partitions": {"launch-0": 4, "launch-1": 0}}, 2)  # joined, nothing handed over yet
    assert not settled({**two, "state": "PREPARING_REBALANCE"}, 2)
    assert not settled({**two, "client_ids": ["launch-0"], "partitions": {"launch-0": 4}}, 2)
    assert not settled(None, 2)  # the broker did not say


def test_the_benchs_job_ids_land_on_the_partitions_they_are_made_for() -> None:
    from peloton.topics import partition_for
    from pelotonctl.bench.pipeline import job_id_on

    ids = [job_id_on(i % 4, 4) for i in range(12)]
    assert [partition_for(j, 4) for j in ids] == [0, 1, 2, 3] * 3 and len(set(ids)) == 12
