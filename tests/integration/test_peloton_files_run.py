"""Peloton's own integration tests' job and stateless files (tests/integration/peloton_files/
test_configs, unchanged from its repository) submitted here as Peloton's tests submitted them,
on three real agent hosts, each seen to do what it did there: a batch job to its end (SUCCEEDED,
or FAILED for the one meant to fail), a service's every instance RUNNING (or, meant to fail,
failing and run again), a stateful job's volume made.

What differs from Peloton's test cluster, and why: no registry is reachable, so the images its
files name (`debian`, `busybox`) are a busybox root file system imported under those names; its
agents were named `peloton-mesos-agent0..2`, so the file pinned to that hostname waits here, with
the reason; and four hosts' worth of one-task-per-host instances find three hosts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.integration.test_isolation import busybox_rootfs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIGS = Path(__file__).resolve().parent / "peloton_files" / "test_configs"
INVALID = {"test_stateless_job_spec_invalid.yaml"}  # Peloton's tests submit it to see it refused
# What each file does on Peloton, where it is not the rule by kind (a batch job SUCCEEDED, every
# instance of a service RUNNING).
ENDS = {"test_job_fail.yaml": "FAILED"}
FAILING_SERVICES = {"test_stateless_job_exit_with_err_spec.yaml", "test_stateless_job_with_bad_spec.yaml"}
WAITS = {"test_job_host_affinity_constraint.yaml": (0, "hostname"),  # (instances running, the reason's words)
         "test_stateless_job_host_limit_1.yaml": (3, "")}
LONG_BATCH = ("sleep 1000", "sleep 300", "sleep 500", "sleep 200", "sleep 120", "& sleep", "sleep 30")


def _job_files() -> list[str]:
    names = []
    for p in sorted(CONFIGS.glob("*.yaml")):
        text = p.read_text()
        if ("defaultConfig" in text or "defaultSpec" in text) and p.name not in INVALID:
            names.append(p.name)
    return names


def test_pelotons_own_job_files_run_as_they_ran_on_peloton(pipeline_factory, tmp_path) -> None:
    p = pipeline_factory(hosts="agent:3:cpu=48,mem_mb=65536,disk_mb=100000", service_backoff_base_s=0.2)
    for stage in ("admit", "entitle", "place", "launch"):
        p.start(stage, wait=False)
    for host in ("agent-0", "agent-1", "agent-2"):
        p.start_agent(host)
    rootfs = busybox_rootfs(tmp_path / "rootfs")
    for image in ("debian", "busybox"):
        imported = p.ctl("image", "import", image, str(rootfs))
        assert imported.returncode == 0, imported.stderr
    seen: dict[str, str] = {}
    for name in _job_files():
        text = (CONFIGS / name).read_text()
        made = p.ctl("job", "create", "/test", str(CONFIGS / name), "--json")
        assert made.returncode == 0, f"{name}: {made.stderr}"
        job = json.loads(made.stdout)["job_id"]
        spec = json.loads(p.ctl("job", "get", job, "--json").stdout)
        kind, count = spec.get("type", "BATCH"), spec.get("instance_count", 0)
        seen[name] = _watch(p, name, job, kind, count, text)
        p.ctl("job", "stop", job)
        p.wait_for(f"{name} stopped", lambda job=job: p.store.get_job(job).state in (
            "SUCCEEDED", "FAILED", "KILLED"), 60)
    assert len(seen) == 40, sorted(seen)


def _watch(p, name: str, job: str, kind: str, count: int, text: str) -> str:
    """Wait until the job does what it did on Peloton; what it did, in words."""
    def tasks():
        return p.store.tasks_of_job(job)

    def running() -> int:
        return sum(1 for t in tasks() if t.state == "RUNNING")

    if name in WAITS:
        want, words = WAITS[name]
        p.wait_for(f"{name}: {want} running", lambda: running() == want, 90)
        time.sleep(2)  # a few placement rounds: no more start
        assert running() == want, name
        if words:  # a placement cycle given up says why in its tasks' events
            p.wait_for(f"{name}: why it waits", lambda: any(words in (e["message"] or "")
                                                            for e in p.store.task_events(job)), 60)
        return f"{want} running, the rest waiting"
    if name in FAILING_SERVICES:
        p.wait_for(f"{name}: runs failing and run again", lambda: any(t.run_id > 1 for t in tasks()), 90)
        return "failing, run again"
    batch_ends = kind == "BATCH" and not any(words in text for words in LONG_BATCH)
    if batch_ends:
        end = ENDS.get(name, "SUCCEEDED")
        assert p.wait_job(job, timeout=120) == end, name
        return end
    want = count if kind != "BATCH" else min(count, _max_running(text) or count)
    p.wait_for(f"{name}: {want} instances RUNNING", lambda: running() >= want, 120)
    if "volume:" in text:
        assert p.store.list_volumes(job), name
    return f"{want} running"


def _max_running(text: str) -> int | None:
    for line in text.splitlines():
        if "maximumRunningInstances" in line:
            return int(line.split(":")[1].split("#")[0])
    return None
