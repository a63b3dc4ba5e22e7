"""Tests for peloton.model.jobconfig: parsing, merging and validating Peloton job configs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from peloton.model.constraint import AndConstraint, LabelConstraint
from peloton.model.health import COMMAND, HealthCheck
from peloton.model.jobconfig import job_spec_from_dict, parse_job_config
from peloton.model.jobspec import CommandSpec, JobConfigError, JobLimits, JobSpec, PortSpec, gang_instances
from peloton.model.resources import Resources
from peloton.model.safe_yaml import YamlLimits
from tests.conftest import EXAMPLES

RESPOOL_FILES = {"default_respool.yaml", "helloworld_pool.yaml"}


def example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.yaml") if p.name not in RESPOOL_FILES)


def test_the_examples_kept_here_are_pelotons_files_unchanged() -> None:
    """The copy in tests/fixtures is byte for byte the shared folder's, where that folder is."""
    shared = EXAMPLES.parents[3] / "shared" / "peloton-examples"
    if not shared.is_dir():
        pytest.skip(f"no shared copy at {shared} to compare with")
    files = sorted(p.relative_to(shared) for p in shared.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(EXAMPLES) for p in EXAMPLES.rglob("*") if p.is_file())
    assert [f for f in files if (shared / f).read_bytes() != (EXAMPLES / f).read_bytes()] == []


def load_example(name: str) -> JobSpec:
    path = EXAMPLES / name
    return parse_job_config(path.read_text())


def minimal(**top: Any) -> dict:
    """A small valid job; keyword arguments replace top-level keys."""
    doc: dict[str, Any] = {
        "name": "job",
        "instancecount": 3,
        "defaultconfig": {
            "resource": {"cpulimit": 1, "memlimitmb": 64, "disklimitmb": 10},
            "command": {"shell": True, "value": "echo hi"},
        },
    }
    doc.update(top)
    return doc


def errors_of(doc: Any) -> list[str]:
    with pytest.raises(JobConfigError) as info:
        job_spec_from_dict(doc)
    return info.value.errors


def with_default(**task: Any) -> dict:
    """minimal() with extra defaultconfig keys."""
    doc = minimal()
    doc["defaultconfig"].update(task)
    return doc


# ---------------------------------------------------------------------------------------------
# Peloton's own example files


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_every_example_job_parses_and_validates(path: Path) -> None:
    spec = parse_job_config(path.read_text())
    assert len(spec.tasks) == spec.instance_count
    assert [t.instance for t in spec.tasks] == list(range(spec.instance_count))
    assert all(t.command.value for t in spec.tasks)


def test_testjob_merge_results() -> None:
    spec = load_example("testjob.yaml")
    assert spec.name == "TestPelotonJob_123"
    assert spec.type == "BATCH"
    assert spec.instance_count == 10
    assert spec.owning_team == "team6"
    assert spec.labels == (("testKey0", "testVal0"), ("testKey1", "testVal1"), ("testKey2", "testVal2"))
    assert spec.priority == 22
    assert spec.preemptible is False
    assert spec.max_running_time_s == 300
    assert spec.placement_strategy == "PACK_HOST"
    assert spec.respool is None

    default_resources = Resources(cpu=1.0, mem_mb=2.0, disk_mb=10.0, gpu=0.0)
    controller = spec.tasks[0]
    assert controller.controller is True
    assert controller.name == "controller0"
    assert controller.command.value == "echo Hello instance 0 && sleep 100"
    assert controller.kill_grace_seconds == 40
    assert controller.resources == default_resources

    fifth = spec.tasks[5]
    assert fifth.controller is False
    assert fifth.command.value.startswith('echo "Job $PELOTON_JOB_ID')
    assert fifth.command.shell is True
    assert fifth.kill_grace_seconds == 30
    assert fifth.resources == default_resources
    assert fifth.health_check is None and fifth.constraint is None
    assert spec.tasks[1].command.value.endswith("sleep 15")
    assert spec.tasks[1].kill_grace_seconds == 30


def test_docker_env_parameters_reach_the_environment() -> None:
    spec = load_example("helloworld_job.yaml")
    for task in spec.tasks:
        env = dict(task.command.environment)
        assert env["MESSAGE"] == "HelloWorld"
        assert env["SLEEP_SECONDS"] == "300"
    assert spec.tasks[0].resources == Resources(cpu=1.0, mem_mb=1024.0, disk_mb=1024.0)


def test_command_environment_variables_form() -> None:
    spec = load_example("test_http_health.yaml")
    env = dict(spec.tasks[0].command.environment)
    assert env == {"INITIAL_COOLOFF_SECS": "60", "CONSECUTIVE_SUCCESSES": "4", "CONSECUTIVE_FAILURES": "2"}
    assert spec.tasks[0].ports == (PortSpec(name="http", value=0, env_name="UBER_HTTP_PORT"),)
    # Health checks without `enabled: true` are inert in Peloton, so this BATCH job is valid, and
    # none runs.
    assert spec.type == "BATCH"
    assert spec.tasks[1].health_check is None
    assert spec.tasks[1].name == "instance1"


def test_constraint_respool_and_service_examples() -> None:
    spec = load_example("testjob_host_affinity_constraint.yaml")
    assert spec.respool == "/respool11"
    pin = LabelConstraint(kind="HOST", condition="EQUAL", key="hostname", value="peloton-mesos-agent0", requirement=1)
    assert spec.tasks[199].constraint == pin

    service = load_example("testjob_stateless_service_host_limit.yaml")
    assert service.type == "SERVICE"
    assert service.tasks[0].labels == (("instance", "ubunny.production.ubunny"),)

    gpu = load_example("testjob_gpu_mesos_containerizer.yaml")
    assert gpu.tasks[0].resources.gpu == 1.0
    assert gpu.tasks[0].command.environment == ()


@pytest.mark.parametrize(
    "name, expected",
    [
        ("testjob_host_affinity_constraint.yaml",
         LabelConstraint("HOST", "EQUAL", "hostname", "peloton-mesos-agent0", 1)),
        ("testjob_stateless_service_host_limit.yaml",
         LabelConstraint("TASK", "EQUAL", "instance", "ubunny.production.ubunny", 0)),
        ("testjob_persistent_volume_docker.yaml", LabelConstraint("TASK", "EQUAL", "testKey11", "testVal11", 0)),
    ],
)
def test_pelotons_constraint_examples_parse_to_typed_trees(name: str, expected: LabelConstraint) -> None:
    spec = load_example(name)
    assert {t.constraint for t in spec.tasks} == {expected}


def test_missing_instancecount_defaults_to_one() -> None:
    spec = load_example("testjob_base.yaml")  # camelCase keys, no instanceCount
    assert spec.instance_count == 1
    assert len(spec.tasks) == 1
    assert spec.tasks[0].resources == Resources(cpu=0.1, mem_mb=2.0, disk_mb=10.0)


# ---------------------------------------------------------------------------------------------
# Key spelling


CAMEL = {
    "instancecount": "instanceCount",
    "owningteam": "owningTeam",
    "ldapgroups": "ldapGroups",
    "changelog": "changeLog",
    "defaultconfig": "defaultConfig",
    "instanceconfig": "instanceConfig",
    "cpulimit": "cpuLimit",
    "memlimitmb": "memLimitMb",
    "disklimitmb": "diskLimitMb",
    "fdlimit": "fdLimit",
    "healthcheck": "healthCheck",
    "killgraceperiodseconds": "killGracePeriodSeconds",
    "maxrunningtime": "maxRunningTime",
    "respoolid": "respoolID",
    "labelconstraint": "labelConstraint",
}


def rename_keys(value: Any, rename) -> Any:
    if isinstance(value, dict):
        return {rename(k) if isinstance(k, str) else k: rename_keys(v, rename) for k, v in value.items()}
    if isinstance(value, list):
        return [rename_keys(v, rename) for v in value]
    return value


@pytest.mark.parametrize(
    "name", ["testjob.yaml", "testjob_host_affinity_constraint.yaml", "test_http_health.yaml"]
)
def test_camel_case_and_lowercase_give_equal_specs(name: str) -> None:
    path = EXAMPLES / name
    doc = yaml.safe_load(path.read_text())
    camel = rename_keys(doc, lambda k: CAMEL.get(k, k))
    assert camel != doc  # the renaming did something
    assert job_spec_from_dict(camel) == job_spec_from_dict(doc)


def test_camel_case_file_equals_its_lowercased_form() -> None:
    path = EXAMPLES / "testjob_base.yaml"
    doc = yaml.safe_load(path.read_text())
    assert job_spec_from_dict(rename_keys(doc, str.lower)) == job_spec_from_dict(doc)


def test_case_insensitive_duplicate_key_is_an_error() -> None:
    doc = minimal()
    doc["instanceCount"] = 3
    assert any("instancecount" in e and "twice" in e for e in errors_of(doc))


# ---------------------------------------------------------------------------------------------
# Merge of instanceconfig over defaultconfig


def test_instanceconfig_ids_may_be_strings_of_digits() -> None:
    spec = job_spec_from_dict(minimal(instanceconfig={"2": {"name": "two"}}))
    assert [t.name for t in spec.tasks] == ["", "", "two"]


def test_merge_is_top_level_only() -> None:
    doc = with_default(
        name="base",
        killgraceperiodseconds=50,
        ports=[{"name": "http", "envname": "PORT_HTTP"}],
        labels=[{"key": "a", "value": "1"}],
        revocable=True,
        command={"value": "base", "environment": {"variables": [{"name": "X", "value": "1"}]}},
    )
    doc["instanceconfig"] = {
        1: {
            "name": "",  # empty scalar: default kept
            "killgraceperiodseconds": 0,  # zero scalar: default kept
            "revocable": False,  # boolean: override wins even when false
            "ports": [],  # present list: override wins
            "command": {"value": "own"},  # message replaced whole: no environment
        },
        2: {"resource": {"cpulimit": 2}},  # message replaced whole: no memory left
    }
    base, one, two = job_spec_from_dict(doc).tasks
    assert base.name == one.name == "base"
    assert one.kill_grace_seconds == 50
    assert base.revocable is True and one.revocable is False
    assert base.ports == (PortSpec("http", 0, "PORT_HTTP"),) and one.ports == ()
    assert one.labels == base.labels == (("a", "1"),)
    assert base.command.environment == (("X", "1"),)
    assert one.command == CommandSpec(value="own", shell=True, arguments=(), environment=())
    assert two.resources == Resources(cpu=2.0)


def test_null_values_mean_absent() -> None:
    doc = minimal(changelog=None, sla=None, respoolid=None)
    doc["defaultconfig"].update(healthcheck=None, container=None, ports=None)
    doc["instanceconfig"] = {0: None, 1: {"command": None}}
    spec = job_spec_from_dict(doc)
    assert spec.respool is None
    assert all(t.command.value == "echo hi" and t.ports == () for t in spec.tasks)


def test_docker_env_adds_to_command_environment() -> None:
    doc = with_default(
        container={
            "type": 1,
            "docker": {
                "image": "debian",
                "parameters": [
                    {"key": "env", "value": "A=from-docker"},
                    {"key": "env", "value": "B=x=y"},
                    {"key": "volume", "value": "/a:/b"},
                ],
            },
        },
        command={"value": "run", "environment": {"A": "from-command", "Lower": 1}},
    )
    env = job_spec_from_dict(doc).tasks[0].command.environment
    assert env == (("A", "from-docker"), ("Lower", "1"), ("B", "x=y"))


def test_command_arguments_and_shell() -> None:
    doc = with_default(command={"shell": False, "value": "/bin/echo", "arguments": ["a", 2]})
    command = job_spec_from_dict(doc).tasks[0].command
    assert command == CommandSpec(value="/bin/echo", shell=False, arguments=("a", "2"), environment=())


def test_command_user_is_read_and_must_be_a_user_name() -> None:
    """Mesos CommandInfo.user: the account the task asks to run as (the agent decides whether it may)."""
    doc = with_default(command={"value": "id", "user": "alice"})
    assert job_spec_from_dict(doc).tasks[0].command.user == "alice"
    assert job_spec_from_dict(with_default(command={"value": "id"})).tasks[0].command.user == ""
    with pytest.raises(JobConfigError, match=r"defaultconfig.command.user: '\.\./x' is not a user name"):
        job_spec_from_dict(with_default(command={"value": "id", "user": "../x"}))


def test_job_level_fields() -> None:
    doc = minimal(
        type="service",
        owner="alice",
        placementstrategy=2,
        respoolid="/pool/leaf",
        sla={"priority": 5, "preemptible": True, "revocable": True},
    )
    spec = job_spec_from_dict(doc)
    assert (spec.type, spec.owner, spec.placement_strategy, spec.respool) == (
        "SERVICE", "alice", "SPREAD_JOB", "/pool/leaf")
    assert (spec.priority, spec.preemptible, spec.revocable) == (5, True, True)
    batch = job_spec_from_dict(minimal(sla={"maxrunningtime": 60}))
    assert batch.max_running_time_s == 60
    assert job_spec_from_dict(minimal(type=2, placementstrategy="SPREAD_JOB")).type == "DAEMON"
    assert job_spec_from_dict(minimal(type="BATCH")).type == "BATCH"


# ---------------------------------------------------------------------------------------------
# Gangs


def spec_with_sla(job_type: str = "BATCH", count: int = 5, **sla: Any) -> JobSpec:
    return job_spec_from_dict(minimal(type=job_type, instancecount=count, sla=sla))


def test_gang_of_minimum_running_instances() -> None:
    assert gang_instances(spec_with_sla(minimumrunninginstances=3)) == [[0, 1, 2], [3], [4]]
    assert gang_instances(spec_with_sla(minimumrunninginstances=5)) == [[0, 1, 2, 3, 4]]


@pytest.mark.parametrize(
    "job_type, sla",
    [
        ("BATCH", {}),
        ("BATCH", {"minimumrunninginstances": 1}),
        ("BATCH", {"minimumrunninginstances": 3, "revocable": True, "preemptible": True}),
    ],
)
def test_no_gang_gives_one_instance_gangs(job_type: str, sla: dict) -> None:
    assert gang_instances(spec_with_sla(job_type, **sla)) == [[0], [1], [2], [3], [4]]


@pytest.mark.parametrize("sla, field, message", [
    ({"minimumrunninginstances": 3}, "sla.minimumrunninginstances", "minimumRunningInstances is for BATCH jobs"),
    ({"maximumrunninginstances": 2}, "sla.maximumrunninginstances", "maximumRunningInstances is for BATCH jobs"),
    ({"maxrunningtime": 60}, "sla.maxrunningtime", "maxRunningTime is for BATCH jobs"),
    ({"revocable": True, "preemptible": False}, "sla.revocable", "a revocable SERVICE job must be preemptible"),
])
def test_a_service_with_batch_limits_is_refused_as_peloton_refuses_it(sla: dict, field: str, message: str) -> None:
    with pytest.raises(JobConfigError, match=f"{field}: {message}"):
        spec_with_sla("SERVICE", **sla)
    assert spec_with_sla("SERVICE", minimumrunninginstances=0, revocable=True, preemptible=True).type == "SERVICE"


# ---------------------------------------------------------------------------------------------
# Validation errors


def set_path(doc: dict, dotted: str, value: Any) -> dict:
    doc = copy.deepcopy(doc)
    *parents, last = dotted.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(int(key) if key.isdigit() else key, {})
    node[int(last) if last.isdigit() else last] = value
    return doc


@pytest.mark.parametrize(
    "dotted, value, expected",
    [
        ("type", "CRON", "type: expected one of BATCH (0), SERVICE (1), DAEMON (2), got 'CRON'"),
        ("type", 3, "type: expected one of"),
        ("instancecount", 0, "instancecount: must be between 1 and"),
        ("instancecount", "ten", "instancecount: expected an integer, got 'ten'"),
        ("instancecount", True, "instancecount: expected an integer, got true"),
        ("defaultconfig.resource.cpulimit", "abc", "defaultconfig.resource.cpulimit: expected a number, got 'abc'"),
        ("defaultconfig.resource.memlimitmb", -1, "defaultconfig.resource.memlimitmb: expected a non-negative number"),
        ("defaultconfig.resource", [1], "defaultconfig.resource: expected a mapping, got a list"),
        ("defaultconfig.command.value", "",
         "defaultconfig.command.value: every instance needs a non-empty command value"),
        ("defaultconfig.command", {"shell": False}, "defaultconfig.command.value: every instance needs a non-empty"),
        ("defaultconfig.command.shell", "yes", "defaultconfig.command.shell: expected true or false, got 'yes'"),
        ("defaultconfig.controller", True,
         "defaultconfig.controller: only instance 0 may be the controller (instances 1-2)"),
        ("instanceconfig.2.controller", True, "instanceconfig.2.controller: only instance 0 may be the controller"),
        ("defaultconfig.restartpolicy.maxfailures", -1,
         "defaultconfig.restartpolicy.maxfailures: expected a non-negative"),
        ("defaultconfig.ports", [{"value": 80}], "defaultconfig.ports[0].name: a port needs a name"),
        ("defaultconfig.ports", [{"name": "http"}],
         "defaultconfig.ports[0].envname: a dynamic port (value 0) needs an envname"),
        ("defaultconfig.ports", [{"name": "h", "value": 70000}], "defaultconfig.ports[0].value: must be at most 65535"),
        ("defaultconfig.ports", [{"name": "h", "value": "80"}],
         "defaultconfig.ports[0].value: expected an integer, got '80'"),
        ("defaultconfig.ports", {"name": "h"}, "defaultconfig.ports: expected a list, got a mapping"),
        ("defaultconfig.healthcheck", {"enabled": True, "type": 1},
         "defaultconfig.healthcheck: BATCH tasks may not have an enabled health check"),
        ("instanceconfig.1.healthCheck", {"enabled": True}, "instanceconfig.1.healthcheck: BATCH tasks may not have"),
        ("sla.maximumrunninginstances", 4, "sla.maximumrunninginstances: must not exceed instancecount (3), got 4"),
        ("sla.minimumrunninginstances", 4, "sla.minimumrunninginstances: must not exceed instancecount (3), got 4"),
        ("instanceconfig.3", {"name": "x"}, "instanceconfig.3: instance id out of range [0, 3)"),
        ("instanceconfig.x", {"name": "x"}, "instanceconfig.x: expected an instance id (an integer), got 'x'"),
        ("instanceconfig", [1], "instanceconfig: expected a mapping of instance ids, got a list"),
        ("sla", "high", "sla: expected a mapping, got 'high'"),
        ("labels", [{"value": "v"}], "labels[0].key: a label needs a non-empty key"),
        ("placementstrategy", 7, "placementstrategy: expected PACK_HOST (1) or SPREAD_JOB (2), got 7"),
        ("defaultconfig.command.environment", ["A=1"],
         "defaultconfig.command.environment: expected a mapping, got a list"),
        ("defaultconfig.resource.cpulimit", float("inf"),
         "defaultconfig.resource.cpulimit: expected a finite number, got inf"),
        ("defaultconfig.resource.memlimitmb", float("-inf"),
         "defaultconfig.resource.memlimitmb: expected a finite number, got -inf"),
        ("defaultconfig.resource.disklimitmb", float("nan"),
         "defaultconfig.resource.disklimitmb: expected a finite number, got nan"),
        ("defaultconfig.resource.fdlimit", float("inf"),
         "defaultconfig.resource.fdlimit: expected a finite number, got inf"),
        ("defaultconfig.resource.cpulimit", 1e9,
         "defaultconfig.resource.cpulimit: must be at most 1024 (the per-task cap, PELOTON_MAX_TASK_CPU), "
         "got 1000000000.0"),
        ("defaultconfig.resource.memlimitmb", 2**22 + 1,
         "defaultconfig.resource.memlimitmb: must be at most 4194304 (the per-task cap, PELOTON_MAX_TASK_MEM_MB), "
         "got 4194305"),
        ("defaultconfig.resource.disklimitmb", 16**500,
         "defaultconfig.resource.disklimitmb: must be at most 104857600 (the per-task cap, PELOTON_MAX_TASK_DISK_MB), "
         "got "),
        ("defaultconfig.resource.gpulimit", 65,
         "defaultconfig.resource.gpulimit: must be at most 64 (the per-task cap, PELOTON_MAX_TASK_GPU), got 65"),
        ("defaultconfig.resource.fdlimit", 2**21,
         "defaultconfig.resource.fdlimit: must be at most 1048576 (the per-task cap)"),
        ("defaultconfig.resource", {"cpulimit": 0, "memlimitmb": 0},
         "defaultconfig.resource: a task must ask for some resource"),
        ("instanceconfig.1.resource", {"fdlimit": 10}, "instanceconfig.1.resource: a task must ask for some resource"),
        ("sla.priority", 2**31, "sla.priority: must be at most 2147483647, got 2147483648"),
        ("sla.maxrunningtime", 2**31, "sla.maxrunningtime: must be at most 2147483647, got 2147483648"),
        ("defaultconfig.killgraceperiodseconds", 86400 * 7 + 1,
         "defaultconfig.killgraceperiodseconds: must be at most 604800, got 604801"),
        ("defaultconfig.constraint", "x", "defaultconfig.constraint: expected a mapping, got 'x'"),
        ("defaultconfig.constraint",
         {"type": 1, "labelconstraint": {"kind": 2, "condition": 2, "requirement": "abc", "label": {"key": "k"}}},
         "defaultconfig.constraint.labelconstraint.requirement: expected a non-negative integer, got 'abc'"),
        ("defaultconfig.constraint", {"type": 2, "andconstraint": {"constraints": ["x"]}},
         "defaultconfig.constraint.andconstraint.constraints[0]: expected a mapping, got 'x'"),
        ("instanceconfig.2.constraint", {"type": 3},
         "instanceconfig.2.constraint.orconstraint: an OR constraint needs orconstraint.constraints"),
    ],
)
def test_validation_error_names_the_path(dotted: str, value: Any, expected: str) -> None:
    errors = errors_of(set_path(minimal(), dotted, value))
    assert any(expected in e for e in errors), errors


def test_minimum_above_maximum_running_instances() -> None:
    errors = errors_of(minimal(sla={"maximumrunninginstances": 2, "minimumrunninginstances": 3}))
    assert errors == ["sla.minimumrunninginstances: must not exceed maximumrunninginstances (2), got 3"]


def test_missing_command_for_some_instances() -> None:
    doc = minimal(instanceconfig={0: {"command": {"value": "only zero"}}})
    del doc["defaultconfig"]["command"]
    assert errors_of(doc) == [
        "defaultconfig.command: every instance needs a command with a non-empty value (instances 1-2)"]


def test_instances_on_a_clean_default_are_checked_once_and_overrides_each() -> None:
    """The default config is checked for its first and last instance only when clean there;
    an override's problem is still found, and a default's problem still names every instance."""
    doc = minimal(instancecount=1000, instanceconfig={500: {"controller": True}})
    assert errors_of(doc) == ["instanceconfig.500.controller: only instance 0 may be the controller"]
    doc = minimal(instancecount=1000, instanceconfig={0: {"name": "first"}})
    doc["defaultconfig"]["controller"] = True  # fine for instance 0 only, which has an override
    assert errors_of(doc) == ["defaultconfig.controller: only instance 0 may be the controller (instances 1-999)"]
    spec = job_spec_from_dict(minimal(instancecount=1000, instanceconfig={7: {"name": "seven"}}))
    assert [t.instance for t in spec.tasks] == list(range(1000))
    assert spec.tasks[7].name == "seven" and spec.tasks[8].name == spec.tasks[999].name == ""
    assert spec.tasks[8].command is spec.tasks[999].command  # the alike share the default's objects


def test_service_tasks_may_have_a_health_check() -> None:
    doc = with_default(healthcheck={"enabled": True, "type": 1, "commandCheck": {"command": "true"}})
    doc["type"] = 1
    assert job_spec_from_dict(doc).tasks[0].health_check == HealthCheck(COMMAND, command="true")


def test_every_problem_is_reported_at_once() -> None:
    doc = minimal(type="NOPE", sla={"priority": "high"})
    doc["defaultconfig"]["resource"]["cpulimit"] = "abc"
    doc["defaultconfig"]["ports"] = [{"name": "x"}]
    error = pytest.raises(JobConfigError, job_spec_from_dict, doc).value
    assert len(error.errors) == 4
    lines = str(error).splitlines()
    assert lines[0] == "invalid job config:"
    assert len(lines) == 5
    assert isinstance(error, ValueError)


def test_invalid_yaml_mentions_the_line() -> None:
    with pytest.raises(JobConfigError) as info:
        parse_job_config("name: x\ninstancecount: 1\n  defaultconfig: {\n")
    assert "line 3" in str(info.value)
    assert info.value.errors[0].startswith("line 3")


@pytest.mark.parametrize("text, got", [("- a\n- b\n", "a list"), ("", "null"), ("just text", "'just text'")])
def test_non_mapping_document_is_refused(text: str, got: str) -> None:
    with pytest.raises(JobConfigError) as info:
        parse_job_config(text)
    assert info.value.errors == [f"<document>: expected a mapping of job config keys, got {got}"]


def test_wrong_types_never_raise_python_errors() -> None:
    weird: list[Any] = [None, 1, "x", [], {}, [None], {"a": None}, True, 1.5]
    keys = ["name", "type", "sla", "labels", "defaultconfig", "instanceconfig", "respoolid", "placementstrategy"]
    task_keys = ["resource", "command", "ports", "container", "healthcheck", "constraint", "restartpolicy",
                 "labels", "controller"]
    for value in weird:
        for key in keys:
            _parse_or_config_error(minimal(**{key: value}))
        for key in task_keys:
            _parse_or_config_error(with_default(**{key: value}))
            _parse_or_config_error(minimal(instanceconfig={1: {key: value}}))


def _parse_or_config_error(doc: dict) -> None:
    try:
        job_spec_from_dict(doc)
    except JobConfigError as exc:
        assert exc.errors and all(": " in e for e in exc.errors)


def test_job_config_error_accepts_a_single_message() -> None:
    error = JobConfigError("name: required")
    assert error.errors == ["name: required"]
    assert str(error) == "invalid job config:\n  name: required"


# ---------------------------------------------------------------------------------------------
# Hostile files: every one is a JobConfigError, quickly


def test_integers_too_long_to_print_are_described_not_printed() -> None:
    huge = 16**5000  # str() refuses it (more than 4300 digits)
    assert errors_of(minimal(sla={"maximumrunninginstances": huge})) == [
        "sla.maximumrunninginstances: must not exceed instancecount (3), got an integer of 20001 bits"]
    assert errors_of(minimal(instancecount=huge)) == [
        "instancecount: must be between 1 and 100000, got an integer of 20001 bits"]
    assert errors_of(minimal(name=huge)) == ["name: expected a string, got an integer of 20001 bits"]


def test_instance_ids_are_ascii_digits() -> None:
    errors = errors_of(minimal(instanceconfig={"²": {"name": "x"}, "9" * 5000: {"name": "y"}}))
    assert errors[0] == "instanceconfig.²: expected an instance id (an integer), got '²'"
    assert errors[1].startswith("instanceconfig.99999")
    assert errors[1].endswith("expected an instance id (an integer), got '" + "9" * 56 + "...")


def test_a_huge_instance_id_is_refused_even_when_instancecount_is_wrong() -> None:
    doc = minimal(instancecount="many", instanceconfig={16**5000: {"name": "x"}})
    assert "instanceconfig.an integer of 20001 bits: instance id out of range [0, 100000)" in errors_of(doc)


def test_a_task_without_any_resource_is_refused_for_every_instance_it_hits() -> None:
    doc = minimal(instanceconfig={0: {"resource": {"cpulimit": 1}}})
    del doc["defaultconfig"]["resource"]
    assert errors_of(doc) == [
        "defaultconfig.resource: a task must ask for some resource (cpulimit, memlimitmb, disklimitmb or gpulimit "
        "above 0) (instances 1-2)"
    ]


def test_a_wrong_resource_amount_is_reported_once() -> None:
    doc = with_default(resource={"cpulimit": "abc"})
    assert errors_of(doc) == ["defaultconfig.resource.cpulimit: expected a number, got 'abc'"]


def test_the_per_task_caps_can_be_changed() -> None:
    doc = with_default(resource={"cpulimit": 8, "memlimitmb": 64})
    assert job_spec_from_dict(doc).tasks[0].resources.cpu == 8.0
    errors = pytest.raises(JobConfigError, job_spec_from_dict, doc, JobLimits(cpu=4)).value.errors
    assert errors == [
        "defaultconfig.resource.cpulimit: must be at most 4 (the per-task cap, PELOTON_MAX_TASK_CPU), got 8"]
    assert JobLimits() == JobLimits(cpu=1024, mem_mb=4_194_304, disk_mb=104_857_600, gpu=64)


def test_yaml_infinity_in_a_file_is_refused() -> None:
    text = yaml.safe_dump(minimal()).replace("cpulimit: 1", "cpulimit: .inf")
    with pytest.raises(JobConfigError) as info:
        parse_job_config(text)
    assert info.value.errors == ["defaultconfig.resource.cpulimit: expected a finite number, got inf"]


def billion_laughs(levels: int = 9) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_billion_laughs_at_the_top_level_is_refused_naming_the_line() -> None:
    with pytest.raises(JobConfigError) as info:
        parse_job_config(billion_laughs() + "name: x\n")
    assert info.value.errors == ["line 7: aliases expand to more than 1000000 nodes (a YAML alias bomb?)"]


def test_an_alias_bomb_inside_a_constraint_is_refused() -> None:
    laughs = "".join(f"      {line}\n" for line in billion_laughs().splitlines())
    text = (
        "name: bomb\n"
        "defaultconfig:\n"
        "  resource: {cpulimit: 1}\n"
        "  command: {value: 'true'}\n"
        "  constraint:\n"
        "    laughs:\n"  # an unknown key: ignored, but it is still YAML to load
        f"{laughs}"
        "    type: 2\n"
        "    andconstraint: {constraints: [*l8]}\n"
    )
    with pytest.raises(JobConfigError) as info:
        parse_job_config(text)
    assert info.value.errors == ["line 13: aliases expand to more than 1000000 nodes (a YAML alias bomb?)"]


def test_constraints_nested_too_deeply_in_a_file_are_refused() -> None:
    c: dict = {"type": 1, "labelconstraint": {"kind": 2, "condition": 2, "requirement": 1,
                                              "label": {"key": "k", "value": "v"}}}
    for _ in range(20):
        c = {"type": 2, "andconstraint": {"constraints": [c]}}
    errors = errors_of(with_default(constraint=c))
    assert len(errors) == 1 and errors[0].endswith(": constraints nested deeper than 16 levels")
    assert errors[0].startswith("defaultconfig.constraint.andconstraint.constraints[0].")


def test_nested_constraints_within_the_limit_parse() -> None:
    pin = {"type": 1, "labelConstraint": {"kind": "HOST", "condition": "CONDITION_EQUAL", "requirement": 1,
                                          "label": {"key": "zone", "value": "z1"}}}
    spec = job_spec_from_dict(
        with_default(constraint={"type": "AND_CONSTRAINT", "andConstraint": {"constraints": [pin]}}))
    assert spec.tasks[2].constraint == AndConstraint((LabelConstraint("HOST", "EQUAL", "zone", "z1", 1),))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[" * 5000 + "]" * 5000, "line 1: nesting deeper than 64 levels"),
        ("".join(" " * i + "a:\n" for i in range(1000)), "line 65: nesting deeper than 64 levels"),
        ("a: &a [1, *a]\n", "line 1: alias *a refers to a node that contains it (a recursive alias)"),
        ("name: x\nsla: {priority: 2001-13-01}\n",
         "line 2, column 17: invalid YAML: cannot read this value: month must be in 1..12"),
        ("instancecount: " + "9" * 5000 + "\n",
         "line 1, column 16: invalid YAML: cannot read this value: Exceeds the limit"),
        ("name: " + "x" * 1_100_000,
         "yaml: the document is 1100006 bytes, more than the limit of 1048576 (PELOTON_MAX_CONFIG_BYTES)"),
    ],
)
def test_hostile_yaml_is_a_job_config_error(text: str, expected: str) -> None:
    with pytest.raises(JobConfigError) as info:
        parse_job_config(text)
    assert len(info.value.errors) == 1 and info.value.errors[0].startswith(expected), info.value.errors


def test_two_thousand_deep_yaml_is_refused_quickly() -> None:
    text = "{a: " * 2000 + "1" + "}" * 2000
    with pytest.raises(JobConfigError) as info:
        parse_job_config(text)
    assert info.value.errors == ["line 1: nesting deeper than 64 levels"]


def test_the_yaml_limits_can_be_changed() -> None:
    text = yaml.safe_dump(minimal())
    parse_job_config(text)
    with pytest.raises(JobConfigError) as info:
        parse_job_config(text, yaml_limits=YamlLimits(max_depth=2))
    assert info.value.errors[0].endswith("nesting deeper than 2 levels")


@pytest.mark.parametrize(
    "text",
    [
        "name: 0x" + "f" * 5000 + "\n",
        "labels: [{key: 0x" + "f" * 5000 + ", value: 1}]\n",
        "instanceconfig: {0x" + "f" * 900 + ": {name: x}}\n",
        "defaultconfig: {resource: {cpulimit: 0x" + "f" * 5000 + "}}\n",
        "defaultconfig: {ports: [{name: p, value: 0x" + "f" * 5000 + "}]}\n",
        "defaultconfig: {command: {value: x, environment: {A: 0x" + "f" * 5000 + "}}}\n",
        "defaultconfig: {constraint: {labelconstraint: {kind: 2, condition: 2, requirement: 0x" + "f" * 5000 + "}}}\n",
        "defaultconfig: {constraint: &c {type: 2, andconstraint: {constraints: [1]}}}\n"
        "instanceconfig: {1: {constraint: *c}}\n",
        "instanceconfig: {'\u00b2': {name: x}, '" + "9" * 5000 + "': {name: y}}\n",
        "defaultconfig: {healthcheck: &h {enabled: true}}\ninstanceconfig: {1: {healthcheck: *h}}\n",
        "sla: {priority: .nan, maxrunningtime: -.inf}\n",
        "? [1, 2]\n: x\n",
        "!!binary AAAA\n",
        "!!python/object:os.system x\n",
    ],
)
def test_hostile_values_in_a_file_are_a_job_config_error(text: str) -> None:
    with pytest.raises(JobConfigError) as info:
        parse_job_config(text)
    assert info.value.errors and all(": " in e for e in info.value.errors)


def test_max_failures_above_pelotons_cap_is_capped_not_refused() -> None:
    text = ("name: j\ninstancecount: 1\ndefaultconfig:\n  command: {value: 'true'}\n  resource: {cpulimit: 1}\n"
            "  restartpolicy: {maxfailures: 500}\n")
    assert parse_job_config(text).tasks[0].max_failures == 100


STATELESS = EXAMPLES / "stateless"


@pytest.mark.parametrize("name", ["testspec.yaml", "testspec_sla.yaml"])
def test_pelotons_stateless_specs_read_as_service_jobs(name: str) -> None:
    spec = parse_job_config((STATELESS / name).read_text())
    assert spec.type == "SERVICE" and spec.name == "TestSpec" and spec.owning_team == "testTeam"
    task = spec.tasks[0]
    assert (task.resources.cpu, task.resources.mem_mb, task.resources.disk_mb) == (0.1, 2.0, 10)
    loop = "while :; do echo running 3; sleep 10; done"
    if name == "testspec.yaml":  # the entrypoint, Peloton's field, runs: /bin/sh and its arguments, no shell around
        assert (task.command.value, task.command.shell, task.command.arguments) == ("/bin/sh", False, ("-c", loop))
    else:  # no entrypoint: the container's v0 command; its liveness check is the health check
        assert (task.command.value, task.command.shell) == (loop, True) and spec.instance_count == 4
        assert task.health_check == HealthCheck(COMMAND, command="ls", initial_interval_s=1, interval_s=3, timeout_s=5,
                                                max_consecutive_failures=3)


def test_a_stateless_spec_with_two_containers_or_a_batch_type_is_refused_with_the_reason() -> None:
    text = """
name: two
type: BATCH
instancecount: 1
defaultspec:
  containers:
  - {resource: {cpulimit: 1}, entrypoint: {value: /bin/true}}
  - {resource: {cpulimit: 1}, entrypoint: {value: /bin/true}}
instancespec:
  0: {containers: [{resource: {cpulimit: 2}, entrypoint: {value: /bin/false}}]}
"""
    with pytest.raises(JobConfigError) as refused:
        parse_job_config(text)
    assert "type: a stateless job spec (defaultSpec) is a SERVICE job, got 'BATCH'" in str(refused.value)
    assert "defaultspec.containers: a pod runs one container here, got 2" in str(refused.value)
    one = parse_job_config(text.replace("type: BATCH\n", "").replace(
        "  - {resource: {cpulimit: 1}, entrypoint: {value: /bin/true}}\n  -", "  -"))
    assert [t.resources.cpu for t in one.tasks] == [2] and one.tasks[0].command.value == "/bin/false"


def test_fields_peloton_honours_and_we_do_not_are_named_never_dropped_in_silence() -> None:
    spec = job_spec_from_dict(with_default(
        volume={"containerpath": "data", "sizemb": 10}, executor={"type": "CUSTOM"},
        preemptionpolicy={"killonpreempt": True}, revocable=True,
        container={"type": 1, "docker": {"image": "debian"}, "volumes": [{"containerpath": "/x"}]}))
    assert [n.split(":")[0] for n in spec.notices] == [
        "defaultconfig.volume", "defaultconfig.executor", "defaultconfig.preemptionpolicy", "defaultconfig.revocable",
        "defaultconfig.container.volumes"]
    assert spec.tasks[0].image == "debian"  # an image is honoured: the task runs in it
    assert job_spec_from_dict(with_default()).notices == ()


def test_a_tasks_image_is_read_from_docker_or_from_a_mesos_containers_docker_name() -> None:
    mesos = {"type": 2, "mesos": {"image": {"type": 2, "docker": {"name": "nvidia/cuda"}}}}
    assert job_spec_from_dict(with_default(container=mesos)).tasks[0].image == "nvidia/cuda"
    docker = {"docker": {"image": "busybox:1.36"}}
    assert job_spec_from_dict(with_default(container=docker)).tasks[0].image == "busybox:1.36"
    assert job_spec_from_dict(with_default()).tasks[0].image == ""
    with pytest.raises(JobConfigError, match="container.docker.image: expected an image name"):
        job_spec_from_dict(with_default(container={"docker": {"image": "../etc"}}))
