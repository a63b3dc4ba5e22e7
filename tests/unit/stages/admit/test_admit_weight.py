"""How many tasks the job manager counts a record for when it sizes a turn (Stage.weight): a
create's instance count, read from its config's text without parsing it; a record of steps, its
runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from peloton.model.jobconfig import parse_job_config
from peloton.model.jobspec import MAX_INSTANCES, JobConfigError
from peloton.runtime import Record
from stages.admit.weight import command_weight, record_weight

OURS = Path(__file__).resolve().parents[4] / "examples" / "jobs"
PELOTONS = Path(__file__).resolve().parents[3] / "fixtures" / "peloton-examples"  # Peloton's own files


def create(config: str, kind: str = "CREATE") -> dict:
    return {"kind": kind, "config": config}


def test_each_example_job_weighs_its_instance_count() -> None:
    checked = 0
    for path in sorted([*OURS.rglob("*.yaml"), *PELOTONS.rglob("*.yaml")]):
        text = path.read_text()
        try:
            count = parse_job_config(text).instance_count
        except JobConfigError:
            continue  # an example of a bad config: whatever it weighs, it is refused when handled
        assert command_weight(create(text)) == count, path.name
        checked += 1
    assert checked >= 25  # ours and Peloton's (its 100k and 50k jobs among them)


@pytest.mark.parametrize("config, weight", [
    ("name: a\ninstanceCount: 1000\n", 1000),
    ("name: a\nInstanceCount: '12'\n", 12),
    (json.dumps({"name": "a", "instanceCount": 250}), 250),
    (json.dumps({"name": "a", "instance_count": 7}), 7),
    ("name: a\n", 1),  # none said: counted as one, parsed and checked when handled
    (f"instancecount: {MAX_INSTANCES * 10}", MAX_INSTANCES),  # refused when handled; weighs the most a job may
    ("instancecount: 0", 1),
])
def test_a_create_weighs_what_its_config_text_says(config: str, weight: int) -> None:
    assert command_weight(create(config)) == weight
    assert command_weight(create(config, "UPDATE")) == weight


def test_other_commands_weigh_one() -> None:
    assert command_weight({"kind": "STOP", "config": None}) == 1
    assert command_weight({"kind": "RESTART", "config": None, "instances": "0-999"}) == 1
    assert command_weight({"kind": "CREATE", "config": None}) == 1


def record(topic: str, schema: str, value: dict) -> Record:
    return Record(topic, 0, 0, "k", schema, value, None, None)


def test_a_record_of_steps_weighs_the_runs_it_moves() -> None:
    # A million-task bench's job manager, its turns bounded by creates alone, read a backlog of
    # statuses in one turn and reached 2.3 GB; weighed by runs, it stayed at 265 MB.
    runs = [{"instance": i, "run_id": 1, "host_id": "h", "offset_ms": 0} for i in range(300)]
    assert record_weight(record("task-status", "peloton.TaskStatusRuns", {"runs": runs, "with_starting": False})) == 300
    assert record_weight(record("task-status", "peloton.TaskStatusRuns", {"runs": runs, "with_starting": True})) == 600
    assert record_weight(record("task-status", "peloton.TaskProgress", {"runs": runs[:40]})) == 40
    assert record_weight(record("task-status", "peloton.TaskStatus", {"instance": 3})) == 1
    assert record_weight(record("job-commands", "peloton.JobCommand", create("instanceCount: 70"))) == 70
