"""Peloton's fields that used to run as if absent, each now honoured, named in a notice or refused
with its path (docs/peloton/fields.md holds the page to them; these tests hold the finer rules)."""

from __future__ import annotations

import pytest
import yaml

from peloton.host.spawn import command_line
from peloton.model.jobconfig import job_spec_from_dict, parse_job_config
from peloton.model.jobspec import JobConfigError
from stages.admit.expand import expand_job, launch_spec
from stages.agent.commands import launch_request
from tests.builders.jobconfig import errors_of, minimal, with_default

RESOURCE = {"cpuLimit": 1, "memLimitMb": 64}


def _argv(text: str) -> list[str]:
    """The argv the agent runs for instance 0 of a job file."""
    spec = parse_job_config(text)
    launch = {**launch_spec("j", spec, spec.tasks[0], 1), "resources": spec.tasks[0].resources.to_record()}
    return command_line(launch_request("h1", launch))


def _stateless(container: dict, **pod: object) -> dict:
    return {"name": "web", "instanceCount": 1,
            "defaultSpec": {"containers": [{"name": "main", "resource": RESOURCE, **container}], **pod}}


def _notices(doc: dict) -> list[str]:
    return [n.split(": ")[0] for n in job_spec_from_dict(doc).notices]


# ---------------------------------------------------------------------------------------------
# command.arguments: Mesos' whole argv


def test_a_mesos_era_command_without_a_shell_runs_with_the_argv_mesos_gave_it() -> None:
    text = yaml.safe_dump(minimal(defaultconfig={"resource": RESOURCE, "command": {
        "shell": False, "value": "/bin/echo", "arguments": ["echo", "-n", "hi there"]}}))
    assert _argv(text) == ["/bin/echo", "-n", "hi there"]
    assert parse_job_config(text).notices == ()


def test_a_first_argument_that_is_not_the_program_is_named_as_argv0_is_the_program_here() -> None:
    # Peloton's own test_job_no_container.yaml: Mesos ran echo with argv ["batch"], printing a blank line.
    doc = minimal(defaultconfig={"resource": RESOURCE, "command": {"shell": False, "value": "echo",
                                                                   "arguments": ["batch"]}})
    assert _argv(yaml.safe_dump(doc)) == ["echo"]
    assert _notices(doc) == ["defaultconfig.command.arguments[0]"]


def test_a_stateless_entrypoint_runs_as_its_value_followed_by_its_arguments() -> None:
    text = yaml.safe_dump(_stateless({"entrypoint": {"value": "/bin/echo", "arguments": ["hi", 2]}}))
    assert _argv(text) == ["/bin/echo", "hi", "2"]
    with pytest.raises(JobConfigError, match=r"defaultspec.containers\[0\].entrypoint.arguments\[1\]: expected a "
                                             "string"):
        job_spec_from_dict(_stateless({"entrypoint": {"value": "/bin/echo", "arguments": ["hi", {"a": 1}]}}))


def test_a_v0_job_read_back_as_a_stateless_spec_runs_the_same_command() -> None:
    from pelotonctl.api.rpc.v1_shapes import job_spec
    from pelotonctl.api.rpc.v1_stateless import spec_text

    text = yaml.safe_dump({**minimal(type="SERVICE"), "defaultconfig": {"resource": RESOURCE, "command": {
        "shell": False, "value": "/bin/sleep", "arguments": ["sleep", "100"]}}})
    job, _tasks = expand_job("j", "/a", parse_job_config(text), text, 1)
    again = parse_job_config(spec_text(job_spec(job)))
    assert again.tasks[0].command == parse_job_config(text).tasks[0].command
    assert _argv(spec_text(job_spec(job))) == ["/bin/sleep", "100"]


# ---------------------------------------------------------------------------------------------
# v0: refused where running as if absent would harm, named where it would not


def test_a_secret_variable_is_refused_as_it_would_reach_the_task_empty() -> None:
    def variables(*items: dict) -> dict:
        return with_default(command={"value": "true", "environment": {"variables": list(items)}})

    assert errors_of(variables({"name": "TOKEN", "type": "SECRET", "secret": {"type": "REFERENCE"}})) == [
        "defaultconfig.command.environment.variables[0].type: a SECRET variable is not supported: there is no "
        "secret store here, and the run would get no value; give its value (type VALUE)"]
    assert errors_of(variables({"name": "A", "value": "1"}, {"name": "TOKEN", "type": 2}))[0].startswith(
        "defaultconfig.command.environment.variables[1].type: a SECRET variable")
    assert errors_of(variables({"name": "TOKEN", "value": "x", "secret": {"type": "VALUE"}}))[0].startswith(
        "defaultconfig.command.environment.variables[0].secret: a secret is for a SECRET variable")
    spec = job_spec_from_dict(variables({"name": "A", "value": "1", "type": "VALUE"}))
    assert spec.tasks[0].command.environment == (("A", "1"),)


def test_a_revocable_service_must_say_it_is_preemptible_as_peloton_s_default_is_not() -> None:
    for sla in ({"revocable": True}, {"revocable": True, "preemptible": False}):
        assert errors_of({**minimal(type="SERVICE"), "sla": sla}) == [
            "sla.revocable: a revocable SERVICE job must be preemptible (preemptible: true; absent, it is false)"]
    assert job_spec_from_dict({**minimal(type="SERVICE"), "sla": {"revocable": True, "preemptible": True}}).revocable
    assert job_spec_from_dict({**minimal(), "sla": {"revocable": True}}).revocable  # a BATCH job may be


def test_fields_read_by_nothing_are_named_with_their_paths_and_the_job_runs() -> None:
    doc = with_default(
        resource={"cpulimit": 1, "fdlimit": 1024},
        command={"value": "true", "uris": [{"value": "https://example.com/x.tgz"}]},
        container={"hostname": "box", "docker": {"network": "BRIDGE", "privileged": True, "parameters": [
            {"key": "env", "value": "A=1"}, {"key": "volume", "value": "/a:/b"}]}})
    doc["ldapgroups"] = ["team6"]
    assert sorted(_notices(doc)) == [
        "defaultconfig.command.uris", "defaultconfig.container.docker.network",
        "defaultconfig.container.docker.parameters[1].key", "defaultconfig.container.docker.privileged",
        "defaultconfig.container.hostname", "defaultconfig.resource.fdlimit", "ldapgroups"]
    assert job_spec_from_dict(doc).tasks[0].command.environment == (("A", "1"),)


def test_container_values_that_ask_for_what_a_run_gets_anyway_are_not_named() -> None:
    docker = {"image": "debian", "network": "HOST", "privileged": False, "forcepullimage": False}
    doc = with_default(resource={"cpulimit": 1, "fdlimit": 0}, container={"type": "DOCKER", "docker": docker})
    assert _notices(doc) == []


def test_the_container_type_says_which_image_runs_where_both_are_given() -> None:
    both = {"docker": {"image": "debian"}, "mesos": {"image": {"type": "DOCKER", "docker": {"name": "nvidia/cuda"}}}}
    assert job_spec_from_dict(with_default(container=both)).tasks[0].image == "debian"
    assert job_spec_from_dict(with_default(container={**both, "type": 2})).tasks[0].image == "nvidia/cuda"
    assert job_spec_from_dict(with_default(container={**both, "type": "DOCKER"})).tasks[0].image == "debian"
    assert errors_of(with_default(container={**both, "type": "RKT"})) == [
        "defaultconfig.container.type: expected DOCKER (1) or MESOS (2), got 'RKT'"]


def test_an_enabled_check_that_would_not_share_the_run_s_environment_is_named() -> None:
    check = {"enabled": True, "type": "COMMAND", "commandcheck": {"command": "true", "unshareenvironments": True}}
    assert _notices({**with_default(healthcheck=check), "type": "SERVICE"}) == [
        "defaultconfig.healthcheck.commandcheck.unshareenvironments"]
    assert _notices({**with_default(healthcheck={**check, "enabled": False}), "type": "SERVICE"}) == []


# ---------------------------------------------------------------------------------------------
# v1alpha: the pod's fields read as v0's


def test_a_pod_s_labels_restart_policy_controller_and_grace_period_are_honoured_as_v0_s() -> None:
    spec = job_spec_from_dict(_stateless({"entrypoint": {"value": "/bin/true"}},
                                         labels=[{"key": "tier", "value": "web"}], restartPolicy={"maxFailures": 4},
                                         controller=True, killGracePeriodSeconds=90))
    task = spec.tasks[0]
    assert (task.labels, task.max_failures, task.controller, task.kill_grace_seconds) == (
        (("tier", "web"),), 4, True, 90)
    assert spec.notices == ()


def test_a_container_s_image_and_environment_are_honoured() -> None:
    spec = job_spec_from_dict(_stateless({"entrypoint": {"value": "/bin/true"}, "image": "debian:bookworm",
                                          "environment": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}))
    assert spec.tasks[0].image == "debian:bookworm"
    assert spec.tasks[0].command.environment == (("A", "1"), ("B", "2"))
    assert errors_of(_stateless({"entrypoint": {"value": "/bin/true"}, "image": "../etc"})) == [
        "defaultspec.containers[0].image: expected an image name like debian:bookworm, got '../etc'"]


def test_a_container_s_environment_comes_after_its_v0_command_s_own_and_wins() -> None:
    for own in ({"variables": [{"name": "A", "value": "old"}, {"name": "C", "value": "3"}]}, {"A": "old", "C": "3"}):
        spec = job_spec_from_dict(_stateless({"command": {"value": "env", "environment": own},
                                              "environment": [{"name": "A", "value": "new"}]}))
        assert dict(spec.tasks[0].command.environment) == {"A": "new", "C": "3"}


def test_an_image_beside_a_mesos_container_naming_another_is_refused_and_the_same_one_is_not() -> None:
    container = {"entrypoint": {"value": "/bin/true"}, "image": "debian:bookworm"}
    assert errors_of(_stateless({**container, "container": {"docker": {"image": "busybox"}}})) == [
        "defaultspec.containers[0].image: 'debian:bookworm' is not the image the container names ('busybox'): "
        "give one image"]
    same = _stateless({**container, "container": {"type": 1, "docker": {"image": "debian:bookworm"}}})
    assert job_spec_from_dict(same).tasks[0].image == "debian:bookworm"


def test_a_liveness_check_s_command_and_http_get_are_read_as_command_check_and_http_check() -> None:
    command = {"enabled": True, "type": "HEALTH_CHECK_TYPE_COMMAND",
               "command": {"value": "test", "arguments": ["-f", "it's ready"]}}
    check = job_spec_from_dict(_stateless({"entrypoint": {"value": "/bin/true"},
                                           "livenessCheck": command})).tasks[0].health_check
    assert check is not None and check.command == "test -f 'it'\"'\"'s ready'"
    http = {"enabled": True, "type": "HEALTH_CHECK_TYPE_HTTP", "httpGet": {"scheme": "https", "portSpec": {
        "value": 8443}, "path": "/ready"}}
    check = job_spec_from_dict(_stateless({"entrypoint": {"value": "/bin/true"},
                                           "livenessCheck": http})).tasks[0].health_check
    assert check is not None and (check.http_scheme, check.http_port, check.http_path) == ("https", 8443, "/ready")
    # v0's names win where both are given, as Peloton's Mesos runtime read them; the other is named.
    both = {**command, "commandCheck": {"command": "true"}}
    spec = job_spec_from_dict(_stateless({"entrypoint": {"value": "/bin/true"}, "livenessCheck": both}))
    assert spec.tasks[0].health_check.command == "true"
    assert [n.split(": ")[0] for n in spec.notices] == ["defaultspec.containers[0].livenesscheck.command"]
    assert errors_of(_stateless({"entrypoint": {"value": "/bin/true"}, "livenessCheck": {
        "enabled": True, "type": "HEALTH_CHECK_TYPE_HTTP", "httpGet": {"path": "/"}}})) == [
        "defaultconfig.healthcheck.httpcheck.port: expected a port from 1 to 65535, got None (instance 0)"]


def test_a_mesos_spec_is_named_whatever_the_container_gives() -> None:
    mesos = {"shell": True, "type": "CONTAINER_TYPE_MESOS", "uris": [{"value": "https://example.com/x"}]}
    entry = _stateless({"entrypoint": {"value": "echo hi"}}, mesosSpec=mesos)
    assert _notices(entry) == ["defaultspec.mesosspec.type", "defaultspec.mesosspec.uris"]
    assert job_spec_from_dict(entry).tasks[0].command.shell
    command = _stateless({"command": {"value": "echo hi", "shell": False}}, mesosSpec=mesos)
    assert _notices(command) == ["defaultspec.mesosspec.shell", "defaultspec.mesosspec.type",
                                 "defaultspec.mesosspec.uris"]
    assert not job_spec_from_dict(command).tasks[0].command.shell


def test_a_port_s_type_is_named_only_where_its_value_says_otherwise() -> None:
    def ports(*items: dict) -> list[str]:
        return _notices(_stateless({"entrypoint": {"value": "/bin/true"}, "ports": list(items)}))

    assert ports({"name": "a", "value": 80, "type": "PORT_TYPE_STATIC"},
                 {"name": "b", "envName": "B", "type": "PORT_TYPE_DYNAMIC_ENV_VAR"}) == []
    assert ports({"name": "a", "envName": "A", "type": "PORT_TYPE_STATIC"},
                 {"name": "b", "value": 81, "type": "PORT_TYPE_DYNAMIC_ENV_VAR"}) == [
        "defaultspec.containers[0].ports[0].type", "defaultspec.containers[0].ports[1].type"]
