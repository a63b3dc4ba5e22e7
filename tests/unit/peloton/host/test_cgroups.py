"""A task's cgroup on both layouts, on a fake tree of files (a pure unit test: no kernel): the
limits written where each version wants them, usage and the kernel's OOM kill read back, and the
agent's parent found inside the cgroup the agent runs in. The real kernel's side is tested with
real agents (tests/integration/test_isolation.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from peloton.host.cgroups import V1, V2, Limits, agent_cgroup_name, find_hierarchy, own_cgroups


def v1_tree(root: Path) -> dict[str, Path]:
    parents = {}
    for c in ("cpu", "cpuacct", "memory", "pids"):
        parents[c] = root / c / "agent"
        parents[c].mkdir(parents=True)
    return parents


def test_v1_limits_land_in_each_controllers_tree(tmp_path: Path) -> None:
    parents = v1_tree(tmp_path)
    h = V1(parents)
    (parents["memory"] / "t1").mkdir()
    (parents["memory"] / "t1" / "memory.memsw.limit_in_bytes").write_text("0")  # swap accounting on
    task = h.make("t1", Limits(cpu=0.5, mem_mb=64, pids=100))
    assert (parents["cpu"] / "t1" / "cpu.cfs_quota_us").read_text() == "50000"
    assert (parents["cpu"] / "t1" / "cpu.cfs_period_us").read_text() == "100000"
    assert (parents["memory"] / "t1" / "memory.limit_in_bytes").read_text() == str(64 * 1024 * 1024)
    assert (parents["memory"] / "t1" / "memory.memsw.limit_in_bytes").read_text() == str(64 * 1024 * 1024)
    assert (parents["pids"] / "t1" / "pids.max").read_text() == "100"
    assert len(task.procs_files()) == 4


def test_v1_usage_and_the_kernels_oom_kill_are_read_back(tmp_path: Path) -> None:
    parents = v1_tree(tmp_path)
    task = V1(parents).make("t1", Limits())
    (parents["cpuacct"] / "t1" / "cpuacct.usage").write_text("2500000000\n")
    (parents["memory"] / "t1" / "memory.max_usage_in_bytes").write_text(str(48 * 1024 * 1024))
    (parents["memory"] / "t1" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    usage = task.usage()
    assert (usage.cpu_seconds, usage.peak_mem_mb, usage.oom_killed) == (2.5, 48.0, True)
    assert usage.describe() == "cpu 2.50 s, peak memory 48.0 MB"


def test_v2_limits_usage_and_oom(tmp_path: Path) -> None:
    task = V2(tmp_path).make("t1", Limits(cpu=1.5, mem_mb=32, pids=10))
    d = tmp_path / "t1"
    assert (d / "cpu.max").read_text() == "150000 100000"
    assert (d / "memory.max").read_text() == str(32 * 1024 * 1024)
    assert (d / "pids.max").read_text() == "10"
    (d / "cpu.stat").write_text("usage_usec 1200000\nuser_usec 1000000\n")
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    usage = task.usage()
    assert (usage.cpu_seconds, usage.peak_mem_mb, usage.oom_killed) == (1.2, None, True)  # no memory.peak: no peak


def test_the_agents_own_cgroup_is_read_from_proc_self_cgroup() -> None:
    text = "9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/x\n0::/user.slice/a\n"
    assert own_cgroups(text) == {"name=systemd": "/", "memory": "/process_api/abc", "cpu": "/x", "cpuacct": "/x",
                                 "": "/user.slice/a"}


@pytest.mark.skipif(os.geteuid() != 0, reason="the agent makes cgroups only as root")
def test_v1_is_chosen_where_v2_offers_too_little_and_the_parent_is_made_inside_the_agents_cgroup(
        tmp_path: Path) -> None:
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    for c in ("cpu,cpuacct", "memory", "pids"):
        (tmp_path / c / "me").mkdir(parents=True)
    proc = tmp_path / "self-cgroup"
    proc.write_text("4:memory:/me\n3:cpu,cpuacct:/me\n2:pids:/me\n0::/\n")
    h, note = find_hierarchy("a1", root=tmp_path, self_cgroup=proc)
    assert isinstance(h, V1) and "offers only hugetlb" in note
    assert h.parents["memory"] == tmp_path / "memory" / "me" / "peloton-agent-a1"
    assert h.parents["cpuacct"] == tmp_path / "cpu,cpuacct" / "me" / "peloton-agent-a1"
    assert h.parents["memory"].is_dir()


def test_two_agents_of_one_name_in_two_stacks_have_cgroups_of_their_own(tmp_path: Path) -> None:
    one, other = tmp_path / "a" / "agents" / "agent-0", tmp_path / "b" / "agents" / "agent-0"
    assert agent_cgroup_name("agent-0", one) != agent_cgroup_name("agent-0", other)
    same = tmp_path / "a" / "." / "agents" / "agent-0"
    assert agent_cgroup_name("agent-0", one) == agent_cgroup_name("agent-0", same)
    assert agent_cgroup_name("agent-0", one).startswith("agent-0-")


def test_the_parent_an_older_agent_made_beside_its_own_is_found_only_where_it_is(tmp_path: Path) -> None:
    parents = v1_tree(tmp_path)
    assert V1(parents).beside("peloton-agent-a1") is None  # nothing is made
    assert not (tmp_path / "memory" / "peloton-agent-a1").exists()
    (tmp_path / "memory" / "peloton-agent-a1").mkdir()  # in one controller's tree is enough
    former = V1(parents).beside("peloton-agent-a1")
    assert former.parents["memory"] == tmp_path / "memory" / "peloton-agent-a1"
    assert former.parents["pids"] == tmp_path / "pids" / "peloton-agent-a1"
    v2 = V2(tmp_path / "me" / "peloton-agent-a1-0123abcd", tmp_path)
    assert v2.beside("peloton-agent-a1") is None
    (tmp_path / "me" / "peloton-agent-a1").mkdir(parents=True)
    assert v2.beside("peloton-agent-a1").parent == tmp_path / "me" / "peloton-agent-a1"


@pytest.mark.skipif(os.geteuid() != 0, reason="the agent makes cgroups only as root")
def test_no_controllers_means_no_cgroups_and_says_which_is_missing(tmp_path: Path) -> None:
    proc = tmp_path / "self-cgroup"
    proc.write_text("0::/\n")
    h, note = find_hierarchy("a1", root=tmp_path, self_cgroup=proc)
    assert h is None and note == f"cgroups off: no cgroup v1 cpu controller under {tmp_path}"


def test_what_a_run_used_is_said_in_its_message_and_read_back() -> None:
    from peloton.model.usage import describe_usage, usage_in

    said = "command exited with code 3; " + describe_usage(2.5, 48.04)
    assert usage_in(said) == {"cpu_seconds": 2.5, "peak_mem_mb": 48.0}
    assert usage_in(describe_usage(0.25, None)) == {"cpu_seconds": 0.25, "peak_mem_mb": None}
    assert usage_in("cpu 2 s are not enough for this task, it said") == {"cpu_seconds": None, "peak_mem_mb": None}
    assert usage_in(None) == {"cpu_seconds": None, "peak_mem_mb": None}


def test_an_agents_gpus_are_named_found_or_numbered_and_must_agree_with_its_resources(tmp_path: Path) -> None:
    from peloton.model.resources import Resources
    from stages.agent.agent import gpu_devices

    none = tmp_path / "dev"
    none.mkdir()
    assert gpu_devices("0,1", Resources(cpu=4), none) == (("0", "1"), Resources(cpu=4, gpu=2))
    assert gpu_devices(None, Resources(cpu=4, gpu=2), none) == (("0", "1"), Resources(cpu=4, gpu=2))
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (none / name).touch()
    assert gpu_devices(None, Resources(cpu=4), none) == (("0", "1"), Resources(cpu=4, gpu=2))
    with pytest.raises(ValueError, match="has 2 GPU devices but the resources say gpu=3"):
        gpu_devices(None, Resources(gpu=3), none)
    with pytest.raises(ValueError, match="names a device twice"):
        gpu_devices("0,0", Resources(), none)


def test_a_runs_memory_limit_has_mesos_floor_as_pelotons_job_files_expect() -> None:
    from peloton.host.cgroups import memory_limit_mb

    # Peloton's test jobs ask for 0.1 MB; Mesos' isolator never limited a run below 32 MB.
    assert (memory_limit_mb(0.1), memory_limit_mb(64), memory_limit_mb(0)) == (32.0, 64.0, 0.0)
