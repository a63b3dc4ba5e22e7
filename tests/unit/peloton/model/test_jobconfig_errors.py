"""peloton.model.jobconfig's refusals: validation errors naming their path, and hostile files
(huge numbers, alias bombs, deep nesting), each a JobConfigError, quickly."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from peloton.model.constraint import AndConstraint, LabelConstraint
from peloton.model.health import COMMAND, HealthCheck
from peloton.model.jobconfig import job_spec_from_dict, parse_job_config
from peloton.model.jobspec import JobConfigError, JobLimits
from peloton.model.safe_yaml import YamlLimits
from tests.builders.jobconfig import errors_of, minimal, with_default

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
