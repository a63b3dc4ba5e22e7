"""Tasks get what they asked for and no more, on host agents with cgroups (issue 25): a task over
its memory is killed by the kernel and ends FAILED with the memory reason while its neighbour on
the same host succeeds; a busy loop with cpuLimit 0.5 gets about half a core. Skipped where the
agent cannot make cgroups (not root, none mounted); its log says why."""

from __future__ import annotations

import json
import time

import pytest

from pelotonctl.admin import create_pool
from tests.integration.conftest import pool_yaml

pytestmark = pytest.mark.integration

JOB = """
name: {name}
instancecount: 2
defaultconfig:
  resource: {{cpulimit: {cpu}, memlimitmb: 64, disklimitmb: 1}}
  restartpolicy: {{maxfailures: 0}}
  command: {{shell: true, value: 'sleep 2'}}
instanceconfig:
  0:
    command: {{shell: true, value: {command!r}}}
"""
HOG = "python3 -c \"x = bytearray(300 * 1024 * 1024); import time; time.sleep(5)\""
BUSY = "timeout 10 sh -c \"while :; do :; done\"; exit 0"


def isolated(p) -> None:
    said = p.log("agent-0").read_text()
    line = next((ln for ln in said.splitlines() if "isolation:" in ln), "")
    if "cgroup v" not in line:
        pytest.skip(f"the agent runs no cgroups here: {line or 'no isolation line in its log'}")


def test_a_task_over_its_memory_fails_with_the_memory_reason_and_its_neighbour_succeeds(pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=4096,disk_mb=1000")
    p.start_all()
    isolated(p)
    job = p.submit(JOB.format(name="hog", cpu=1, command=HOG))
    assert p.wait_job(job, timeout=60) == "FAILED"
    hog, neighbour = sorted(p.store.tasks_of_job(job), key=lambda t: t.instance)
    assert (hog.state, hog.reason) == ("FAILED", "REASON_CONTAINER_LIMITATION_MEMORY"), (hog.reason, hog.message)
    assert "memory limit of 64 MB exceeded" in hog.message and "peak memory" in hog.message
    assert hog.host_id == neighbour.host_id and neighbour.state == "SUCCEEDED"
    assert p.procs["agent-0"].poll() is None  # the agent is unharmed


def test_a_busy_loop_with_half_a_cpu_gets_about_half_a_core(pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=4096,disk_mb=1000")
    p.start_all()
    isolated(p)
    job = p.submit(JOB.format(name="busy", cpu=0.5, command=BUSY))
    assert p.wait_job(job, timeout=60) == "SUCCEEDED"
    shown = json.loads(p.ctl("task", "get", job, "0", "--json").stdout)  # its cgroup's cpuacct
    used = shown["cpu_seconds"]
    print(f"the busy loop used {used:.2f} cpu seconds in 10 s with cpuLimit 0.5; peak {shown['peak_mem_mb']} MB")
    assert 3.0 <= used <= 6.0, shown["message"]
    ended = [e for e in json.loads(p.ctl("task", "events", job, "0", "--json").stdout) if e["state"] == "SUCCEEDED"]
    assert ended[0]["cpu_seconds"] == used and ended[0]["peak_mem_mb"] is not None


GPU_JOB = """
name: gpus
instancecount: 3
defaultconfig:
  resource: {cpulimit: 0.1, memlimitmb: 16, disklimitmb: 1, gpulimit: 1}
  command: {shell: true, value: 'echo "$CUDA_VISIBLE_DEVICES $NVIDIA_VISIBLE_DEVICES" > devices; sleep 4'}
"""


def test_two_one_gpu_tasks_on_a_two_gpu_agent_get_different_devices_and_a_third_waits(pipeline_factory) -> None:
    # No NVIDIA device here: the agent numbers the resources' 2 GPUs 0 and 1 (and says so).
    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=1024,disk_mb=1000,gpu=2")
    create_pool(p.settings, p.store, "/gpus", pool_yaml(4).replace("kind: gpu, reservation: 0, limit: 0",
                                                                    "kind: gpu, reservation: 2, limit: 2"))
    p.start_all()
    assert "GPUs: 0,1" in p.log("agent-0").read_text()
    job = p.submit(GPU_JOB, pool="/gpus")
    p.wait_for("two of the three running", lambda: p.counts(job).get("RUNNING", 0) == 2, 60)
    time.sleep(1)
    tasks = p.store.tasks_of_job(job)
    running = [t for t in tasks if t.state == "RUNNING"]
    assert len(running) == 2 and [t.state for t in tasks if t not in running] != ["RUNNING"]

    def devices(task) -> str:
        path = p.settings.home / "sandboxes" / task.task_id / "devices"
        p.wait_for(f"{task.task_id} wrote its devices", path.exists, 10)
        return path.read_text().split()

    seen = [devices(t) for t in running]
    assert sorted(d[0] for d in seen) == ["0", "1"] and all(d[0] == d[1] for d in seen), seen
    assert p.wait_job(job, timeout=60) == "SUCCEEDED"
    third = next(t for t in p.store.tasks_of_job(job) if t.instance not in {r.instance for r in running})
    assert devices(third)[0] in ("0", "1")  # a device given back by one that ended


def test_a_sandbox_grown_past_its_disk_limit_is_killed_with_the_disk_reason(pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=4096,disk_mb=1000")
    p.start_all()
    isolated(p)
    job = p.submit(JOB.format(name="filler", cpu=1, command="head -c 5000000 /dev/zero > fill; sleep 30"))
    assert p.wait_job(job, timeout=60) == "FAILED"
    filler, neighbour = sorted(p.store.tasks_of_job(job), key=lambda t: t.instance)
    assert (filler.state, filler.reason) == ("FAILED", "REASON_CONTAINER_LIMITATION_DISK"), filler.message
    assert "disk limit of 1 MB exceeded" in filler.message and neighbour.state == "SUCCEEDED"
