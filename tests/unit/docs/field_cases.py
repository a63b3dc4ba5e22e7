"""The minimal Peloton job files the field table's tests parse (tests/unit/docs/test_field_table.py):
a valid base job of each kind, and one case per row the page calls refused, noted, bookkeeping or
honoured, and per update option, each setting its field on a base."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from peloton.model.jobconfig import parse_job_config
from peloton.model.jobspec import JobConfigError, JobLimits, JobSpec


def base_path(path: str) -> str:
    """A row's path without its trailing `.*` (the field it covers with what is under it)."""
    return path.removesuffix(".*")

_RESOURCE = {"cpuLimit": 1, "memLimitMb": 64}
_CONTAINER = {"name": "main", "resource": _RESOURCE, "entrypoint": {"value": "/bin/true"}}
BASES: dict[str, dict[str, Any]] = {
    "batch": {"name": "fields", "type": "BATCH", "instanceCount": 2,
              "defaultConfig": {"resource": _RESOURCE, "command": {"value": "true"}}},
    "service": {"name": "fields", "type": "SERVICE", "instanceCount": 2,
                "defaultConfig": {"resource": _RESOURCE, "command": {"value": "true"}}},
    "daemon": {"name": "fields", "type": "DAEMON",
               "defaultConfig": {"resource": _RESOURCE, "command": {"value": "true"}}},
    "stateless": {"name": "fields", "instanceCount": 2, "defaultSpec": {"containers": [_CONTAINER]}},
    # A stateless container with Peloton's deprecated v0 command and no entrypoint.
    "stateless_command": {"name": "fields", "instanceCount": 2, "defaultSpec": {
        "containers": [{"name": "main", "resource": _RESOURCE, "command": {"value": "true"}}]}},
}
_COMMAND_CHECK = {"enabled": True, "type": "COMMAND", "commandCheck": {"command": "true"}}
_V1_COMMAND_CHECK = {"enabled": True, "type": "HEALTH_CHECK_TYPE_COMMAND", "commandCheck": {"command": "true"}}
_V1_HTTP_CHECK = {"enabled": True, "type": "HEALTH_CHECK_TYPE_HTTP", "httpCheck": {"port": 8080}}
_CONSTRAINT = {"type": "LABEL_CONSTRAINT", "labelConstraint": {
    "kind": "HOST", "condition": "EQUAL", "label": {"key": "zone", "value": "a"}, "requirement": 1}}
_V1_CONSTRAINT = {"type": "CONSTRAINT_TYPE_LABEL", "labelConstraint": {
    "kind": "LABEL_CONSTRAINT_KIND_HOST", "condition": "LABEL_CONSTRAINT_CONDITION_EQUAL",
    "label": {"key": "zone", "value": "a"}, "requirement": 1}}


@dataclass(frozen=True)
class Case:
    """A job with one field of a row set, and the state the row gives it. `sets` holds dotted
    paths (a list on the way means its first item); `context` is set in the job with and without
    the field; `names` is the path a notice or a refusal names ("": the row's, lowercased)."""

    section: str
    row: str
    state: str
    base: str
    sets: dict[str, Any]
    names: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    limits: JobLimits = JobLimits()
    check: Callable[[Any], bool] | None = None  # honoured: what the field must change

    @property
    def id(self) -> str:
        return f"{self.section}:{self.row}:{self.state}"

    @property
    def named(self) -> str:
        return self.names or base_path(self.row).lower()


def _set(doc: dict, dotted: str, value: Any) -> None:
    node = doc
    *parents, last = dotted.split(".")
    for key in parents:
        child = node.setdefault(key, {})
        node = child[0] if isinstance(child, list) else child
    node[last] = value


def _doc(case: Case, with_field: bool = True) -> dict:
    doc = copy.deepcopy(BASES["batch" if case.base.startswith("update") else case.base])
    for dotted, value in [*case.context.items(), *(case.sets.items() if with_field else ())]:
        _set(doc, dotted, copy.deepcopy(value))
    return doc


def _paths(messages: tuple[str, ...] | list[str]) -> list[str]:
    return [m.split(": ", 1)[0].lower() for m in messages]


def _parse(doc: dict, limits: JobLimits) -> tuple[JobSpec | None, list[str]]:
    """(the spec, or None when refused; the paths the notices or the refusal name)."""
    try:
        spec = parse_job_config(yaml.safe_dump(doc, sort_keys=False), limits)
    except JobConfigError as exc:
        return None, _paths(exc.errors)
    return spec, _paths(spec.notices)


def _task(spec: JobSpec) -> Any:
    return spec.tasks[0]


REFUSED = [
    # Peloton's default for preemptible is false: a revocable service that leaves it out is refused.
    Case("v0", "sla.revocable", "refused", "service", {"sla.revocable": True}),
    Case("v0", "sla.maximumRunningInstances", "refused", "service", {"sla.maximumRunningInstances": 1}),
    Case("v0", "sla.minimumRunningInstances", "refused", "service", {"sla.minimumRunningInstances": 1}),
    Case("v0", "sla.maxRunningTime", "refused", "service", {"sla.maxRunningTime": 60}),
    Case("v0", "instanceConfig.*", "refused", "daemon", {"instanceConfig": {"0": {"name": "one"}}}),
    Case("v0", "defaultConfig.controller", "refused", "batch", {"defaultConfig.controller": True}),
    Case("v0", "defaultConfig.healthCheck.enabled", "refused", "batch", {"defaultConfig.healthCheck": _COMMAND_CHECK},
         names="defaultconfig.healthcheck"),
    Case("v0", "defaultConfig.healthCheck.type", "refused", "service",
         {"defaultConfig.healthCheck": {**_COMMAND_CHECK, "type": "GRPC"}}),
    Case("v0", "defaultConfig.command.user", "refused", "batch", {"defaultConfig.command.user": "alice"},
         limits=JobLimits(users="", default_user="nobody")),
    Case("v0", "defaultConfig.command.environment.variables.type", "refused", "batch",
         {"defaultConfig.command.environment.variables": [
             {"name": "TOKEN", "type": "SECRET", "secret": {"type": "REFERENCE", "reference": {"name": "vault"}}}]},
         names="defaultconfig.command.environment.variables[0].type"),
    Case("v1", "defaultSpec.containers", "refused", "stateless", {"defaultSpec.containers": [_CONTAINER, _CONTAINER]}),
    Case("v1", "sla.revocable", "refused", "stateless", {"sla.revocable": True, "sla.preemptible": False}),
    Case("v1", "defaultSpec.controller", "refused", "stateless", {"defaultSpec.controller": True},
         names="defaultconfig.controller"),
]

NOTED = [
    Case("v0", "ldapGroups", "noted", "batch", {"ldapGroups": ["team6"]}),
    Case("v0", "instanceCount", "noted", "daemon", {"instanceCount": 3}),
    Case("v0", "defaultConfig.revocable", "noted", "batch", {"defaultConfig.revocable": True}),
    Case("v0", "defaultConfig.preemptionPolicy.*", "noted", "batch",
         {"defaultConfig.preemptionPolicy": {"type": "TYPE_PREEMPTIBLE", "killOnPreempt": True}}),
    Case("v0", "defaultConfig.executor.*", "noted", "batch",
         {"defaultConfig.executor": {"type": "CUSTOM", "executorId": {"value": "thermos"}}}),
    Case("v0", "defaultConfig.resource.fdLimit", "noted", "batch",
         {"defaultConfig.resource": {**_RESOURCE, "fdLimit": 10}}),
    Case("v0", "defaultConfig.container.docker.parameters.key", "noted", "batch",
         {"defaultConfig.container.docker.parameters": [{"key": "network", "value": "host"}]},
         names="defaultconfig.container.docker.parameters[0].key"),
    Case("v0", "defaultConfig.container.volumes", "noted", "batch",
         {"defaultConfig.container.volumes": [{"containerPath": "/tmp", "hostPath": "/tmp", "mode": "RW"}]}),
    Case("v0", "defaultConfig.container.*", "noted", "batch",
         {"defaultConfig.container.hostname": "box", "defaultConfig.container.docker.privileged": True,
          "defaultConfig.container.docker.network": "BRIDGE", "defaultConfig.container.rlimitInfo": {
              "rlimits": [{"type": "RLMT_NOFILE", "soft": 10}]}},
         names="defaultconfig.container.hostname"),
    Case("v0", "defaultConfig.command.arguments", "noted", "batch",
         {"defaultConfig.command": {"shell": False, "value": "/bin/busybox", "arguments": ["ls", "-l"]}},
         names="defaultconfig.command.arguments[0]"),
    Case("v0", "defaultConfig.command.uris.*", "noted", "batch",
         {"defaultConfig.command": {"value": "true", "uris": [{"value": "https://example.com/tool",
                                                               "executable": True}]}}),
    Case("v0", "defaultConfig.healthCheck.commandCheck.unshareEnvironments", "noted", "service",
         {"defaultConfig.healthCheck": {**_COMMAND_CHECK, "commandCheck": {"command": "true",
                                                                           "unshareEnvironments": True}}}),
    Case("v1", "ldapGroups", "noted", "stateless", {"ldapGroups": ["team6"]}),
    Case("v1", "defaultSpec.containers.executor.*", "noted", "stateless",
         {"defaultSpec.containers.executor": {"type": "CUSTOM"}}, names="defaultconfig.executor"),
    Case("v1", "defaultSpec.initContainers.*", "noted", "stateless",
         {"defaultSpec.initContainers": [{"name": "init", "entrypoint": {"value": "/bin/false"}}]}),
    Case("v1", "defaultSpec.preemptionPolicy.killOnPreempt", "noted", "stateless",
         {"defaultSpec.preemptionPolicy.killOnPreempt": True}, names="defaultconfig.preemptionpolicy"),
    Case("v1", "defaultSpec.revocable", "noted", "stateless", {"defaultSpec.revocable": True},
         names="defaultconfig.revocable"),
    Case("v1", "defaultSpec.volumes.*", "noted", "stateless",
         {"defaultSpec.volumes": [{"name": "scratch", "type": "VOLUME_TYPE_EMPTY_DIR", "emptyDir": {"sizeInMb": 16}}]}),
    Case("v1", "defaultSpec.hostPorts.*", "noted", "stateless",
         {"defaultSpec.hostPorts": [{"name": "http", "value": 8080}]}),
    Case("v1", "defaultSpec.mesosSpec.shell", "noted", "stateless_command", {"defaultSpec.mesosSpec.shell": True},
         context={"defaultSpec.containers.command.shell": False}),
    Case("v1", "defaultSpec.mesosSpec.type", "noted", "stateless",
         {"defaultSpec.mesosSpec.type": "CONTAINER_TYPE_DOCKER"}),
    # Named whatever the container gives: an entrypoint, or Peloton's deprecated v0 command.
    *(Case("v1", f"defaultSpec.mesosSpec.{key}.*", "noted", base, {f"defaultSpec.mesosSpec.{key}": value},
           names=f"defaultspec.mesosspec.{key.lower()}")
      for base in ("stateless", "stateless_command")
      for key, value in (("dockerParameters", [{"key": "network", "value": "host"}]),
                         ("uris", [{"value": "https://example.com/tool", "executable": True}]),
                         ("executorSpec", {"type": "EXECUTOR_TYPE_CUSTOM", "executorId": "thermos"}),
                         ("networkSpec", {"type": "NETWORK_TYPE_HOST"}))),
    Case("v1", "defaultSpec.containers.command.*", "noted", "stateless",
         {"defaultSpec.containers.command": {"value": "echo beside", "shell": True}},
         names="defaultspec.containers[0].command"),
    Case("v1", "defaultSpec.containers.volumeMounts.*", "noted", "stateless",
         {"defaultSpec.containers.volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
         names="defaultspec.containers[0].volumemounts"),
    Case("v1", "defaultSpec.containers.ports.templateName", "noted", "stateless",
         {"defaultSpec.containers.ports": [{"name": "http", "value": 0, "envName": "PORT", "templateName": "http"}]},
         names="defaultspec.containers[0].ports[0].templatename"),
    Case("v1", "defaultSpec.containers.ports.type", "noted", "stateless",
         {"defaultSpec.containers.ports": [{"name": "http", "value": 0, "envName": "PORT",
                                            "type": "PORT_TYPE_DYNAMIC_TEMPLATE_VAR"}]},
         names="defaultspec.containers[0].ports[0].type"),
    Case("v1", "defaultSpec.containers.livenessCheck.successThreshold", "noted", "stateless",
         {"defaultSpec.containers.livenessCheck": {**_V1_COMMAND_CHECK, "successThreshold": 2}},
         names="defaultspec.containers[0].livenesscheck.successthreshold"),
    Case("v1", "defaultSpec.containers.livenessCheck.command.*", "noted", "stateless",
         {"defaultSpec.containers.livenessCheck": {**_V1_COMMAND_CHECK, "command": {"value": "false"}}},
         names="defaultspec.containers[0].livenesscheck.command"),
    Case("v1", "defaultSpec.containers.livenessCheck.httpGet.*", "noted", "stateless",
         {"defaultSpec.containers.livenessCheck": {**_V1_HTTP_CHECK, "httpGet": {"port": 9090, "path": "/other"}}},
         names="defaultspec.containers[0].livenesscheck.httpget"),
    Case("v1", "defaultSpec.containers.livenessCheck.httpGet.httpHeaders.*", "noted", "stateless",
         {"defaultSpec.containers.livenessCheck": {"enabled": True, "type": "HEALTH_CHECK_TYPE_HTTP", "httpGet": {
             "port": 8080, "httpHeaders": [{"name": "Host", "value": "example.com"}]}}},
         names="defaultspec.containers[0].livenesscheck.httpget.httpheaders"),
    Case("v1", "defaultSpec.containers.readinessCheck.*", "noted", "stateless",
         {"defaultSpec.containers.readinessCheck": _V1_HTTP_CHECK}, names="defaultspec.containers[0].readinesscheck"),
]

# A dropped field, and Peloton's bookkeeping, leave the spec as it is without them, and say nothing.
SILENT = [
    Case("v0", "changeLog.*", "bookkeeping", "batch", {"changeLog.updatedBy": "someone", "changeLog.createdAt": 1}),
    Case("v0", "changeLog.version", "bookkeeping", "batch", {"changeLog.version": 3}),
    Case("v1", "revision.*", "bookkeeping", "stateless", {"revision": {"version": 2, "updatedBy": "someone"}}),
    Case("v1", "defaultSpec.podName.value", "bookkeeping", "stateless", {"defaultSpec.podName.value": "fields-0"}),
]

HONOURED = [
    Case("v0", "defaultConfig.volume.*", "honoured", "batch",
         {"defaultConfig.volume": {"containerPath": "data", "sizeMB": 10}},
         check=lambda s: (s.tasks[0].volume.container_path, s.tasks[0].volume.size_mb) == ("data", 10)),
    Case("v1", "defaultSpec.volume.*", "honoured", "stateless",
         {"defaultSpec.volume": {"containerPath": "data", "sizeMb": 10}},
         check=lambda s: (s.tasks[0].volume.container_path, s.tasks[0].volume.size_mb) == ("data", 10)),
    Case("v0", "instanceCount", "honoured", "batch", {"instanceCount": 5}, check=lambda s: len(s.tasks) == 5),
    Case("v0", "labels.key", "honoured", "batch", {"labels": [{"key": "tier", "value": "web"}]},
         check=lambda s: s.labels == (("tier", "web"),)),
    Case("v0", "respoolID.value", "honoured", "batch", {"respoolID.value": "/team"},
         check=lambda s: s.respool == "/team"),
    Case("v0", "placementStrategy", "honoured", "batch", {"placementStrategy": "PLACEMENT_STRATEGY_SPREAD_JOB"},
         check=lambda s: s.placement_strategy == "SPREAD_JOB"),
    Case("v0", "sla.priority", "honoured", "batch", {"sla.priority": 7}, check=lambda s: s.priority == 7),
    Case("v0", "sla.revocable", "honoured", "service", {"sla.revocable": True, "sla.preemptible": True},
         check=lambda s: s.revocable and s.preemptible),
    Case("v0", "sla.maxRunningTime", "honoured", "batch", {"sla.maxRunningTime": 60},
         check=lambda s: s.max_running_time_s == 60),
    Case("v0", "sla.minimumRunningInstances", "honoured", "batch", {"sla.minimumRunningInstances": 2},
         check=lambda s: s.min_running_instances == 2),
    Case("v0", "defaultConfig.resource.cpuLimit", "honoured", "batch", {"defaultConfig.resource.cpuLimit": 2.5},
         check=lambda s: _task(s).resources.cpu == 2.5),
    Case("v0", "defaultConfig.resource.memLimitMb", "honoured", "batch", {"defaultConfig.resource.memLimitMb": 512},
         check=lambda s: _task(s).resources.mem_mb == 512),
    Case("v0", "defaultConfig.command.value", "honoured", "batch", {"defaultConfig.command.value": "echo hi"},
         check=lambda s: _task(s).command.value == "echo hi"),
    # Mesos' argv, argv[0] first: the program runs with the arguments after it.
    Case("v0", "defaultConfig.command.arguments", "honoured", "batch",
         {"defaultConfig.command": {"shell": False, "value": "/bin/echo", "arguments": ["echo", "hi"]}},
         check=lambda s: (_task(s).command.value, _task(s).command.arguments) == ("/bin/echo", ("hi",))),
    Case("v0", "defaultConfig.command.environment.variables.name", "honoured", "batch",
         {"defaultConfig.command.environment.variables": [{"name": "GREETING", "value": "hello"}]},
         check=lambda s: ("GREETING", "hello") in _task(s).command.environment),
    Case("v0", "defaultConfig.command.environment.variables.type", "honoured", "batch",
         {"defaultConfig.command.environment.variables": [{"name": "GREETING", "value": "hello", "type": "VALUE"}]},
         check=lambda s: ("GREETING", "hello") in _task(s).command.environment),
    Case("v0", "defaultConfig.container.docker.image", "honoured", "batch",
         {"defaultConfig.container.docker.image": "debian:bookworm"},
         check=lambda s: _task(s).image == "debian:bookworm"),
    Case("v0", "defaultConfig.container.type", "honoured", "batch",
         {"defaultConfig.container": {"type": "MESOS", "docker": {"image": "debian:bookworm"},
                                      "mesos": {"image": {"type": "DOCKER", "docker": {"name": "nvidia/cuda"}}}}},
         check=lambda s: _task(s).image == "nvidia/cuda"),
    Case("v0", "defaultConfig.container.docker.parameters.key", "honoured", "batch",
         {"defaultConfig.container.docker.parameters": [{"key": "env", "value": "GREETING=hello"}]},
         check=lambda s: ("GREETING", "hello") in _task(s).command.environment),
    Case("v0", "defaultConfig.labels.key", "honoured", "batch", {"defaultConfig.labels": [{"key": "a", "value": "b"}]},
         check=lambda s: _task(s).labels == (("a", "b"),)),
    Case("v0", "defaultConfig.ports.envName", "honoured", "batch",
         {"defaultConfig.ports": [{"name": "http", "value": 0, "envName": "PORT"}]},
         check=lambda s: _task(s).ports[0].env_name == "PORT"),
    Case("v0", "defaultConfig.constraint.labelConstraint.kind", "honoured", "batch",
         {"defaultConfig.constraint": _CONSTRAINT}, check=lambda s: _task(s).constraint.kind == "HOST"),
    Case("v0", "defaultConfig.killGracePeriodSeconds", "honoured", "batch",
         {"defaultConfig.killGracePeriodSeconds": 90},
         check=lambda s: _task(s).kill_grace_seconds == 90),
    Case("v0", "defaultConfig.restartPolicy.maxFailures", "honoured", "batch",
         {"defaultConfig.restartPolicy.maxFailures": 3}, check=lambda s: _task(s).max_failures == 3),
    Case("v0", "defaultConfig.healthCheck.type", "honoured", "service", {"defaultConfig.healthCheck": _COMMAND_CHECK},
         check=lambda s: _task(s).health_check.type == "COMMAND"),
    Case("v1", "defaultSpec.containers.name", "honoured", "stateless", {"defaultSpec.containers.name": "web"},
         check=lambda s: _task(s).name == "web"),
    Case("v1", "defaultSpec.containers.entrypoint.arguments", "honoured", "stateless",
         {"defaultSpec.containers.entrypoint": {"value": "/bin/echo", "arguments": ["hi"]}},
         check=lambda s: (_task(s).command.value, _task(s).command.arguments, _task(s).command.shell)
         == ("/bin/echo", ("hi",), False)),
    Case("v1", "defaultSpec.mesosSpec.shell", "honoured", "stateless", {"defaultSpec.mesosSpec.shell": True},
         check=lambda s: _task(s).command.shell),
    Case("v1", "defaultSpec.containers.livenessCheck.*", "honoured", "stateless",
         {"defaultSpec.containers.livenessCheck": _V1_HTTP_CHECK},
         check=lambda s: _task(s).health_check.http_port == 8080),
    Case("v1", "defaultSpec.containers.livenessCheck.command.*", "honoured", "stateless",
         {"defaultSpec.containers.livenessCheck": {"enabled": True, "type": "HEALTH_CHECK_TYPE_COMMAND",
                                                   "command": {"value": "test", "arguments": ["-f", "a file"]}}},
         check=lambda s: _task(s).health_check.command == "test -f 'a file'"),
    Case("v1", "defaultSpec.containers.livenessCheck.httpGet.*", "honoured", "stateless",
         {"defaultSpec.containers.livenessCheck": {"enabled": True, "type": "HEALTH_CHECK_TYPE_HTTP",
                                                   "httpGet": {"port": 8080, "path": "/ready"}}},
         check=lambda s: (_task(s).health_check.http_port, _task(s).health_check.http_path) == (8080, "/ready")),
    Case("v1", "defaultSpec.constraint.*", "honoured", "stateless", {"defaultSpec.constraint": _V1_CONSTRAINT},
         check=lambda s: _task(s).constraint.kind == "HOST"),
    Case("v1", "defaultSpec.containers.container.*", "honoured", "stateless",
         {"defaultSpec.containers.container.docker.image": "debian:bookworm"},
         check=lambda s: _task(s).image == "debian:bookworm"),
    Case("v1", "defaultSpec.containers.image", "honoured", "stateless", {"defaultSpec.containers.image":
                                                                         "debian:bookworm"},
         check=lambda s: _task(s).image == "debian:bookworm"),
    Case("v1", "defaultSpec.containers.environment.name", "honoured", "stateless",
         {"defaultSpec.containers.environment": [{"name": "GREETING", "value": "hello"}]},
         check=lambda s: ("GREETING", "hello") in _task(s).command.environment),
    Case("v1", "defaultSpec.containers.ports.type", "honoured", "stateless",
         {"defaultSpec.containers.ports": [{"name": "http", "value": 8080, "type": "PORT_TYPE_STATIC"}]},
         check=lambda s: _task(s).ports[0].value == 8080),
    Case("v1", "defaultSpec.labels.key", "honoured", "stateless",
         {"defaultSpec.labels": [{"key": "tier", "value": "web"}]},
         check=lambda s: _task(s).labels == (("tier", "web"),)),
    Case("v1", "defaultSpec.restartPolicy.maxFailures", "honoured", "stateless",
         {"defaultSpec.restartPolicy.maxFailures": 3}, check=lambda s: _task(s).max_failures == 3),
    Case("v1", "defaultSpec.controller", "honoured", "stateless", {"instanceCount": 1, "defaultSpec.controller": True},
         check=lambda s: _task(s).controller),
    Case("v1", "defaultSpec.killGracePeriodSeconds", "honoured", "stateless",
         {"defaultSpec.killGracePeriodSeconds": 90}, check=lambda s: _task(s).kill_grace_seconds == 90),
    Case("v1", "sla.maximumUnavailableInstances", "honoured", "stateless", {"sla.maximumUnavailableInstances": 1},
         check=lambda s: s.max_unavailable_instances == 1),
]

# The update config is not the job parser's: a file's is read by `job update`'s update_fields (and
# refused by update_config_problems), and the v0 API's CreateUpdate takes its own.
UPDATES = [
    Case("update", "updateConfig.batchSize", "honoured", "update_file", {"updateConfig.batchSize": 3},
         check=lambda o: o.batch_size == 3),
    Case("update", "updateConfig.maxInstanceAttempts", "honoured", "update_file",
         {"updateConfig.maxInstanceAttempts": 2},
         check=lambda o: o.max_instance_retries == 2),
    Case("update", "updateConfig.startPaused", "honoured", "update_file", {"updateConfig.startPaused": True},
         check=lambda o: o.start_paused),
    Case("update", "updateConfig.inPlace", "honoured", "update_file", {"updateConfig.inPlace": True},
         check=lambda o: o.in_place),
    Case("update", "updateConfig.batchPercentage", "refused", "update_file", {"updateConfig.batchPercentage": 50.0}),
    Case("update", "updateConfig.stopBeforeUpdate", "refused", "update_file", {"updateConfig.stopBeforeUpdate": True}),
    Case("update", "updateConfig.startTasks", "refused", "update_file", {"updateConfig.startTasks": True}),
    Case("update", "updateConfig.batchPercentage", "refused", "update_api", {"batchPercentage": 50.0}),
    Case("update", "updateConfig.stopBeforeUpdate", "refused", "update_api", {"stopBeforeUpdate": True}),
    Case("update", "updateConfig.startTasks", "refused", "update_api", {"startTasks": True}),
]

CASES = [*REFUSED, *NOTED, *SILENT, *HONOURED, *UPDATES]
