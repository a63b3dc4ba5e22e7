"""A job through all four stages on a real broker, with real subprocess tasks."""

from __future__ import annotations

import time

import pytest

from tests.conftest import STORES

pytestmark = pytest.mark.integration

HELLO = """
name: hello
instancecount: 5
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 64, disklimitmb: 10}
  command:
    shell: true
    value: 'echo "task $PELOTON_TASK_ID instance $PELOTON_INSTANCE_ID of $PELOTON_JOB_ID"'
"""

FAILING = """
name: failing
instancecount: 2
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 64}
  restartpolicy: {maxfailures: 2}
  command: {shell: true, value: 'echo about to fail >&2; exit 7'}
"""


@pytest.mark.parametrize("store", STORES)
def test_a_job_runs_to_succeeded_through_all_four_stages(pipeline_factory, store) -> None:
    p = pipeline_factory(store_kind=store)
    p.start_all()
    job_id = p.submit(HELLO)
    assert p.wait_job(job_id) == "SUCCEEDED"
    tasks = p.store.tasks_of_job(job_id)
    assert [(t.instance, t.run_id, t.state, t.exit_code) for t in tasks] == [(i, 1, "SUCCEEDED", 0) for i in range(5)]
    for t in tasks:
        stdout = (p.home / "sandboxes" / t.task_id / "stdout").read_text()
        assert stdout == f"task {t.task_id} instance {t.instance} of {job_id}\n"
    states = [e["state"] for e in p.store.task_events(job_id) if e["instance"] == 0]
    # READY only if its gang waited for admission (entitle may not have read the pool yet), PLACING
    # and PLACED only if it waited for hosts (place may not have read them yet)
    assert states in ([*ready, *placing, "LAUNCHING", "LAUNCHED", "STARTING", "RUNNING", "SUCCEEDED"]
                      for ready in ([], ["READY"]) for placing in ([], ["PLACING", "PLACED"])), states
    # Every launch ended, and every allocation is released: releases travel admit -> entitle
    # after the job is marked SUCCEEDED, so give them a moment.
    assert p.store.active_launches(["local-0", "local-1"]) == []
    deadline = time.monotonic() + 10
    while p.store.allocations() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.store.allocations() == []


# On Cassandra in `make soak`: the succeeded test above runs the pipeline on it in `make test`.
@pytest.mark.parametrize("store", [pytest.param(s, marks=pytest.mark.slow) if s == "cassandra" else s for s in STORES])
def test_a_failing_command_ends_failed_with_its_exit_code_after_its_retries(pipeline_factory, store) -> None:
    p = pipeline_factory(store_kind=store)
    p.start_all()
    job_id = p.submit(FAILING)
    assert p.wait_job(job_id) == "FAILED"
    for t in p.store.tasks_of_job(job_id):
        assert (t.state, t.exit_code, t.run_id, t.failures) == ("FAILED", 7, 2, 2)
        assert t.message == "command exited with code 7"
    assert p.store.launch_counts(job_id) == {0: 2, 1: 2}


def test_pelotons_own_example_jobs_run_unchanged_on_simulated_hosts(pipeline_factory, peloton_examples) -> None:
    p = pipeline_factory(hosts="sim:8:cpu=16,mem_mb=32768,disk_mb=100000", sim_task_seconds=0.1)
    p.start_all()
    jobs = [p.submit((peloton_examples / name).read_text()) for name in ("testjob.yaml", "helloworld_job.yaml")]
    assert [p.wait_job(j) for j in jobs] == ["SUCCEEDED", "SUCCEEDED"]
