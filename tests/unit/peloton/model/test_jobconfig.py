"""peloton.model.jobconfig: Peloton's example files, key spelling, merging instanceconfig over
defaultconfig, gangs, and Peloton's stateless specs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from peloton.model.constraint import LabelConstraint
from peloton.model.health import COMMAND, HealthCheck
from peloton.model.jobconfig import job_spec_from_dict, parse_job_config
from peloton.model.jobspec import CommandSpec, JobConfigError, JobSpec, PortSpec, gang_instances
from peloton.model.resources import Resources
from tests.builders.jobconfig import errors_of, minimal, with_default
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
    # Mesos' CommandInfo without a shell: value is the program, arguments the whole argv, argv[0] first.
    doc = with_default(command={"shell": False, "value": "/bin/echo", "arguments": ["echo", "a", 2]})
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
        executor={"type": "CUSTOM"},
        preemptionpolicy={"killonpreempt": True}, revocable=True,
        container={"type": 1, "docker": {"image": "debian"}, "volumes": [{"containerpath": "/x"}]}))
    assert [n.split(":")[0] for n in spec.notices] == [
        "defaultconfig.executor", "defaultconfig.preemptionpolicy", "defaultconfig.revocable",
        "defaultconfig.container.volumes"]
    assert spec.tasks[0].image == "debian"  # an image is honoured: the task runs in it
    assert job_spec_from_dict(with_default()).notices == ()


def test_a_tasks_persistent_volume_is_read_and_refused_outside_the_sandbox() -> None:
    from peloton.model.volumes import VolumeSpec

    def service(**volume):
        return job_spec_from_dict({**with_default(volume=volume), "type": "SERVICE"})
    assert service(containerpath="data/db", sizemb=20).tasks[0].volume == VolumeSpec("data/db", 20)
    # Peloton's own stateful test job is a BATCH job (it names no type): any kind may keep one
    assert job_spec_from_dict(with_default(volume={"containerpath": "d", "sizemb": 1})).tasks[0].volume is not None
    for volume, words in (({"containerpath": "/data", "sizemb": 1}, "containerpath: must be relative"),
                          ({"containerpath": "a/../../b", "sizemb": 1}, "containerpath: must be a path inside"),
                          ({"containerpath": "stdout", "sizemb": 1}, "containerpath: must not be 'stdout'"),
                          ({"containerpath": "data", "sizemb": 0}, "sizemb: a volume needs a size above 0")):
        with pytest.raises(JobConfigError, match=words):
            service(**volume)


def test_a_tasks_image_is_read_from_docker_or_from_a_mesos_containers_docker_name() -> None:
    mesos = {"type": 2, "mesos": {"image": {"type": 2, "docker": {"name": "nvidia/cuda"}}}}
    assert job_spec_from_dict(with_default(container=mesos)).tasks[0].image == "nvidia/cuda"
    docker = {"docker": {"image": "busybox:1.36"}}
    assert job_spec_from_dict(with_default(container=docker)).tasks[0].image == "busybox:1.36"
    assert job_spec_from_dict(with_default()).tasks[0].image == ""
    with pytest.raises(JobConfigError, match="container.docker.image: expected an image name"):
        job_spec_from_dict(with_default(container={"docker": {"image": "../etc"}}))


def test_a_stateless_pod_s_mesos_spec_shell_runs_its_entrypoint_through_a_shell() -> None:
    # As Peloton's own stateless test spec has it: an entrypoint that is a shell command line.
    text = """name: TestSpec
instanceCount: 1
defaultSpec:
  containers:
  - resource: {cpuLimit: 0.1, memLimitMb: 32, diskLimitMb: 10}
    entrypoint: {value: 'while :; do echo running; sleep 10; done'}
  mesosSpec:
    shell: true
    uris: [{value: 'http://example.com/x.tgz'}]
"""
    spec = parse_job_config(text)
    command = spec.tasks[0].command
    assert command.shell and command.value.startswith("while :")
    assert any(n.startswith("defaultspec.mesosspec.uris: not honoured") for n in spec.notices)
    plain = parse_job_config(text.replace("  mesosSpec:\n    shell: true\n    uris: [{value: 'http://example.com/x.tgz'}]\n",
                                          ""))
    assert not plain.tasks[0].command.shell
