"""Persistent volumes in the launch specs: each instance its own, its size counted as its runs'
disk, the instance pinned to the host of its first launch from its next run on, the pin kept
across an update's new spec."""

from __future__ import annotations

from peloton.model.constraint import constraint_from_json, evaluate
from peloton.model.jobconfig import parse_job_config
from peloton.model.volumes import home_of, kept_home
from stages.admit.expand import expand_job, next_run

JOB = """name: store
type: SERVICE
instanceCount: 3
defaultConfig:
  resource: {cpuLimit: 0.1, memLimitMb: 16, diskLimitMb: 10}
  volume: {containerPath: data, sizeMB: 20}
  command: {value: 'sleep 60'}
  constraint:
    type: LABEL_CONSTRAINT
    labelConstraint: {kind: HOST, condition: CONDITION_EQUAL, requirement: 1, label: {key: rack, value: r1}}
"""


def test_each_instance_has_its_own_volume_and_its_size_is_disk_of_each_run() -> None:
    _job, tasks = expand_job("j", "/p", parse_job_config(JOB), JOB, 1)
    assert [t.spec["volume"] for t in tasks] == [
        {"volume_id": f"j-{i}", "container_path": "data", "size_mb": 20, "host_id": ""} for i in range(3)]
    assert {t.spec["resources"]["disk_mb"] for t in tasks} == {30.0}


def test_the_next_run_is_pinned_to_the_host_of_the_last_and_an_update_keeps_the_pin() -> None:
    _job, [task, *_] = expand_job("j", "/p", parse_job_config(JOB), JOB, 1)
    next_run(task, 2)  # never placed: nothing to pin to
    assert home_of(task.spec) == "" and task.run_id == 2
    task.host_id = "h7"
    next_run(task, 3)
    assert home_of(task.spec) == "h7"
    pin = constraint_from_json(task.spec["constraint_json"])
    assert evaluate(pin, {"hostname": "h7", "rack": "r1"}, {})
    assert not evaluate(pin, {"hostname": "h8", "rack": "r1"}, {})  # pinned
    assert not evaluate(pin, {"hostname": "h7", "rack": "r2"}, {})  # and still the job's own constraint
    next_run(task, 4)
    assert task.spec["constraint_json"].count("h7") == 1  # pinned once, however many runs
    _j, [fresh, *_] = expand_job("j", "/p", parse_job_config(JOB.replace("sleep 60", "sleep 61")), JOB, 5)
    kept = kept_home(task.spec, fresh.spec)
    assert home_of(kept) == "h7" and kept["command"] == "sleep 61"
    assert kept_home(fresh.spec, fresh.spec) == fresh.spec  # nothing made yet: as given
