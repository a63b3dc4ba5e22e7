"""What a `job update` replaces and refuses, decided in stages/admit/commands.py with no broker and
no store: an instance whose task config changes in any way gets a new run; a job file's
updateConfig fields that no update here runs as asked are refused with their path."""

from __future__ import annotations

import copy

import pytest

from peloton.model.jobconfig import job_spec_from_dict
from stages.admit.commands import changed_instances, replace_diff, update_config_problems
from tests.builders.jobconfig import minimal

SERVICE = minimal(type="SERVICE")


def _changed(**default: object) -> dict:
    doc = copy.deepcopy(SERVICE)
    doc["defaultconfig"].update(default)
    return doc


@pytest.mark.parametrize("change", [
    {"container": {"docker": {"image": "debian:bookworm"}}},
    {"healthcheck": {"enabled": True, "type": "COMMAND", "commandcheck": {"command": "true"}}},
    {"name": "renamed"},
], ids=["image", "health check", "task name"])
def test_an_update_that_changes_only_the_image_the_health_check_or_the_name_replaces_every_instance(
        change: dict) -> None:
    old, new = job_spec_from_dict(SERVICE), job_spec_from_dict(_changed(**change))
    assert changed_instances(old, new) == [0, 1, 2]
    assert replace_diff(old, new)["instances_updated"] == [0, 1, 2]


def test_an_update_that_changes_nothing_of_the_tasks_replaces_none() -> None:
    old, new = job_spec_from_dict(SERVICE), job_spec_from_dict({**SERVICE, "description": "now described"})
    assert changed_instances(old, new) == []


def test_an_update_that_changes_one_instance_s_own_config_replaces_that_one_alone() -> None:
    doc = copy.deepcopy(SERVICE)
    doc["instanceconfig"] = {1: {"container": {"docker": {"image": "debian:bookworm"}}}}
    assert changed_instances(job_spec_from_dict(SERVICE), job_spec_from_dict(doc)) == [1]


@pytest.mark.parametrize("key, value, words", [
    ("batchPercentage", 50.0, "updateconfig.batchpercentage: batchPercentage is not supported here: give batchSize"),
    ("stopBeforeUpdate", True, "updateconfig.stopbeforeupdate: stopBeforeUpdate is not supported here"),
    ("startTasks", True, "updateconfig.starttasks: startTasks is not supported here: a stopped instance stays "
                         "stopped"),
])
def test_a_job_file_s_update_config_that_no_update_runs_as_asked_is_refused_with_its_path(
        key: str, value: object, words: str) -> None:
    text = f"name: job\nupdateConfig:\n  batchSize: 1\n  {key}: {value}\n"
    [problem] = update_config_problems(text)
    assert problem.startswith(words), problem
    unset = f"name: job\nupdateConfig:\n  batchSize: 1\n  {key}: {'false' if value is True else 0}\n"
    assert update_config_problems(unset) == []
    assert update_config_problems("name: job\n") == update_config_problems("[not, a, job]") == []
