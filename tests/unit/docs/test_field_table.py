"""docs/peloton/fields.md says, for every field of Peloton's v0 job config, v1alpha stateless job
spec and v0 update config, what this scheduler does with it. These tests hold the page to the
protos (every field has a row, every row names a field) and to the parser (a field the page calls
refused is refused with its path, a noted one is named in a notice, a dropped one changes nothing
and says nothing, and a sample of honoured ones reach the job's spec without a notice)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from peloton.api.v0.job import job_pb2
from peloton.api.v0.update import update_pb2
from peloton.api.v1alpha.job.stateless import stateless_pb2
from peloton.model.jobconfig import parse_job_config
from peloton.model.jobspec import JobConfigError, JobLimits, JobSpec

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "peloton" / "fields.md"

STATES = ("honoured", "noted", "refused", "bookkeeping")  # none dropped: read by nothing, named nowhere
TABLE_HEADER = "| field | state | what happens here |"
# A "## " heading names the message its tables start from: (section, root message, path prefix).
SECTIONS = {"`JobConfig`": ("v0", job_pb2.JobConfig.DESCRIPTOR, ""),
            "`JobSpec`": ("v1", stateless_pb2.JobSpec.DESCRIPTOR, ""),
            "`UpdateConfig`": ("update", update_pb2.UpdateConfig.DESCRIPTOR, "updateConfig")}
# Deep enough for every Peloton message; Mesos' own messages nest further, and are read only as far
# as the page describes them.
MAX_DEPTH = 12


# ---------------------------------------------------------------------------------------------
# The page


@dataclass(frozen=True)
class Row:
    section: str
    paths: tuple[str, ...]
    states: tuple[tuple[str, str], ...]  # (state, condition or ""), in the page's order
    alias: str  # `same as X`: X, else ""
    line: int

    def has(self, state: str) -> bool:
        return any(s == state for s, _condition in self.states)


_PART = re.compile(rf"^(?:({'|'.join(STATES)})|same as `([^`]+)`)(?: \(([^()]+)\))?$")


def _rows(text: str) -> list[Row]:
    rows: list[Row] = []
    section, in_table = "", False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            found = [name for key, (name, _d, _p) in SECTIONS.items() if key in line]
            assert len(found) == 1, f"line {number}: a '## ' heading names one of {list(SECTIONS)}: {line}"
            section = found[0]
        if line == TABLE_HEADER:
            assert section, f"line {number}: a field table before the first '## ' section"
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
        if not in_table or line.startswith("| ---"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 3, f"line {number}: a row has three cells: {line}"
        paths = tuple(re.findall(r"`([^`]+)`", cells[0]))
        assert paths and cells[0] == ", ".join(f"`{p}`" for p in paths), f"line {number}: field cell {cells[0]!r}"
        states, alias = [], ""
        for part in cells[1].split("; "):
            match = _PART.match(part)
            assert match, f"line {number}: {part!r} is no state ({', '.join(STATES)}, or same as `X`)"
            if match.group(2):
                alias = match.group(2)
            else:
                states.append((match.group(1), match.group(3) or ""))
        rows.append(Row(section, paths, tuple(states), alias, number))
    return rows


ROWS = _rows(PAGE.read_text())


def _base(path: str) -> str:
    return path.removesuffix(".*")


def _rows_of(section: str) -> dict[str, Row]:
    """Each path of a section's rows -> its row."""
    return {path: row for row in ROWS if row.section == section for path in row.paths}


def _covering(section: str, path: str) -> tuple[str, Row] | None:
    """The row that describes `path`: its own, else the nearest `X.*` row above it."""
    rows = _rows_of(section)
    if path in rows:
        return path, rows[path]
    covering = [p for p in rows if p.endswith(".*") and (path == _base(p) or path.startswith(_base(p) + "."))]
    if not covering:
        return None
    best = max(covering, key=len)
    return best, rows[best]


def _described_below(section: str, path: str) -> bool:
    return any(_base(p).startswith(path + ".") for p in _rows_of(section))


# ---------------------------------------------------------------------------------------------
# The protos


def _message_of(fd: Any) -> Any:
    """The message a field holds (a map's value message), or None for a scalar or an enum."""
    message = fd.message_type
    if message is not None and message.GetOptions().map_entry:
        message = message.fields_by_name["value"].message_type
    return message


def _leaves(section: str, message: Any, prefix: str, seen: frozenset[str], depth: int) -> Iterator[str]:
    """The paths of every field a table must describe: scalars and enums, and the messages a walk
    stops at (a message already above, one too deep, a Mesos message the page describes only as a
    whole). A map's entries are walked as their value message, under the map's own path."""
    for fd in message.fields:
        path = f"{prefix}.{fd.json_name}" if prefix else fd.json_name
        inner = _message_of(fd)
        stop = (inner is None or not inner.fields or inner.full_name in seen or depth >= MAX_DEPTH
                or inner.full_name.startswith("google.protobuf.")
                or (inner.full_name.startswith("mesos.") and not _described_below(section, path)))
        if stop:
            yield path
        else:
            yield from _leaves(section, inner, path, seen | {inner.full_name}, depth + 1)


def _all_leaves(section: str) -> list[str]:
    _name, root, prefix = next(v for v in SECTIONS.values() if v[0] == section)
    return list(_leaves(section, root, prefix, frozenset({root.full_name}), 0))


def _resolves(section: str, path: str) -> bool:
    """Whether a dotted path names a field of the section's root message (through Mesos' messages
    and maps' values too)."""
    _name, message, prefix = next(v for v in SECTIONS.values() if v[0] == section)
    parts = path.split(".")
    if prefix:
        if parts[0] != prefix:
            return False
        parts = parts[1:]
    for i, part in enumerate(parts):
        fd = next((f for f in message.fields if f.json_name == part), None) if message is not None else None
        if fd is None:
            return False
        message = _message_of(fd)
        if message is None and i < len(parts) - 1:
            return False
    return True


def _alias_section(section: str, target: str) -> str:
    return section if any(_base(p) == target or p.startswith(target + ".") for p in _rows_of(section)) else "v0"


# ---------------------------------------------------------------------------------------------
# The page against the protos


def test_the_page_has_a_title_and_a_table_for_each_message() -> None:
    text = PAGE.read_text()
    assert text.startswith("# ") and not text.startswith("## ")
    assert {row.section for row in ROWS} == {"v0", "v1", "update"}
    assert len(ROWS) > 100


@pytest.mark.parametrize("section", ["v0", "v1", "update"])
def test_every_field_of_the_protos_has_a_row(section: str) -> None:
    leaves = _all_leaves(section)
    assert len(leaves) > (5 if section == "update" else 60)
    missing = [path for path in leaves if _covering(section, path) is None]
    assert not missing, f"fields of Peloton's protos without a row in {PAGE.name} ({section}): {missing}"


def test_every_row_names_a_field_of_the_protos_once() -> None:
    wrong = [(row.line, p) for row in ROWS for p in row.paths if not _resolves(row.section, _base(p))]
    assert not wrong, f"rows naming no field of the protos: {wrong}"
    seen: dict[tuple[str, str], int] = {}
    for row in ROWS:
        for path in row.paths:
            assert (row.section, path) not in seen, f"{path} has two rows (lines {seen[row.section, path]}, {row.line})"
            seen[row.section, path] = row.line


def test_every_row_that_says_same_as_points_at_rows_for_each_of_its_fields() -> None:
    wrong = []
    for section in ("v0", "v1", "update"):
        for leaf in _all_leaves(section):
            covering = _covering(section, leaf)
            if covering is None or not covering[1].alias:
                continue
            path, row = covering
            target_section = _alias_section(section, row.alias)
            twin = row.alias + leaf[len(_base(path)):]
            described = _covering(target_section, twin) is not None or _described_below(target_section, twin)
            if not (_resolves(target_section, twin) and described):
                wrong.append((leaf, twin))
    assert not wrong, f"fields a 'same as' row sends to no row: {wrong}"


# ---------------------------------------------------------------------------------------------
# The page against the parser: minimal jobs, each with one field set


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
        return self.names or _base(self.row).lower()


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
# Rows whose state shows only beyond the parser: `job create` refuses a file naming another pool
# than the one it is given (tests/unit/pelotonctl/test_job_create_pool.py).
NOT_FROM_A_FILE = {("v0", "respoolID.value", "refused"), ("v1", "respoolId.value", "refused")}


def test_every_refused_noted_and_dropped_row_has_a_case_and_every_case_its_row() -> None:
    by_path = {(c.section, c.row, c.state) for c in CASES}
    missing = []
    for row in ROWS:
        for state in ("refused", "noted", "dropped"):
            if row.has(state) and not any((row.section, p, state) in by_path | NOT_FROM_A_FILE for p in row.paths):
                missing.append((row.line, row.paths[0], state))
    assert not missing, f"rows of {PAGE.name} without a case here: {missing}"
    for case in CASES:
        its = _rows_of(case.section).get(case.row)
        assert its is not None, f"{case.id}: no such row"
        assert its.has(case.state) or (case.state == "honoured" and its.alias), f"{case.id}: the row says {its.states}"


@pytest.mark.parametrize("base", sorted(BASES))
def test_each_base_job_is_valid_and_draws_no_notice(base: str) -> None:
    spec, notices = _parse(BASES[base], JobLimits())
    assert spec is not None and notices == [], (base, notices)


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.id)
def test_a_refused_field_is_refused_with_its_path(case: Case) -> None:
    assert _parse(_doc(case, with_field=False), case.limits)[0] is not None, "the job without it is valid"
    spec, named = _parse(_doc(case), case.limits)
    assert spec is None, f"{case.id}: accepted"
    assert case.named in named, f"{case.id}: the refusal names {named}"


@pytest.mark.parametrize("case", NOTED, ids=lambda c: c.id)
def test_a_noted_field_is_accepted_with_a_notice_naming_its_path(case: Case) -> None:
    spec, named = _parse(_doc(case), case.limits)
    assert spec is not None, f"{case.id}: refused: {named}"
    assert case.named in named, f"{case.id}: the notices name {named}"


@pytest.mark.parametrize("case", SILENT, ids=lambda c: c.id)
def test_a_dropped_or_bookkeeping_field_changes_nothing_and_says_nothing(case: Case) -> None:
    without, _ = _parse(_doc(case, with_field=False), case.limits)
    spec, named = _parse(_doc(case), case.limits)
    assert spec is not None and without is not None, f"{case.id}: refused: {named}"
    assert named == [], f"{case.id}: named in notices {named}: the page should say noted"
    assert spec == without, f"{case.id}: the field changed the job's spec: the page should say what it does"


@pytest.mark.parametrize("case", HONOURED, ids=lambda c: c.id)
def test_an_honoured_field_reaches_the_spec_without_a_notice(case: Case) -> None:
    spec, named = _parse(_doc(case), case.limits)
    assert spec is not None, f"{case.id}: refused: {named}"
    assert named == [], f"{case.id}: named in notices {named}"
    assert case.check is not None and case.check(spec), f"{case.id}: not in the spec"


def _instance_twin(case: Case) -> Case:
    """The case with its field set in instance 1's entry (instanceConfig, instanceSpec)."""
    renames: tuple[tuple[str, str], ...] = (("defaultconfig.", "instanceconfig.1."),)
    if case.section == "v0":
        old, new = "defaultConfig.", "instanceConfig.1."
        context = dict(case.context)
    else:  # an instanceSpec pod is a whole pod: it has its own container, the base's (an entrypoint, or a command)
        old, new = "defaultSpec.", "instanceSpec.1."
        renames = (*renames, ("defaultspec.", "instancespec.1."))
        context = {**case.context, "instanceSpec.1.containers": BASES[case.base]["defaultSpec"]["containers"]}
    named = case.named
    for before, after in renames:
        named = named.replace(before, after)
    return Case(case.section, case.row, case.state, case.base, {k.replace(old, new): v for k, v in case.sets.items()},
                names=named, context=context, limits=case.limits)


@pytest.mark.parametrize("case", [c for c in NOTED if c.row.startswith(("defaultConfig.", "defaultSpec."))],
                         ids=lambda c: c.id)
def test_an_instance_s_own_config_fares_as_the_default_one(case: Case) -> None:
    twin = _instance_twin(case)
    spec, named = _parse(_doc(twin), twin.limits)
    assert spec is not None and twin.named in named, f"{twin.id}: {named}"


@pytest.mark.parametrize("case", [c for c in UPDATES if c.base == "update_file"], ids=lambda c: c.id)
def test_an_update_config_in_a_job_file_is_read_as_the_page_says(case: Case) -> None:
    from stages.admit.commands import update_config_problems, update_fields

    def text(with_field: bool) -> str:
        return yaml.safe_dump(_doc(case, with_field), sort_keys=False)

    def options(with_field: bool) -> Any:
        return update_fields(text(with_field))[1]

    if case.state == "refused":
        assert update_config_problems(text(False)) == [], case.id
        assert _paths(update_config_problems(text(True))) == [case.named], case.id
    else:
        assert case.check is not None and case.check(options(True)) and options(True) != options(False), case.id


@pytest.mark.parametrize("case", [c for c in UPDATES if c.base == "update_api"], ids=lambda c: c.id)
def test_an_update_config_the_v0_api_refuses_is_refused_with_its_name(case: Case) -> None:
    import grpc

    from peloton.api.v0.update.svc import update_svc_pb2
    from pelotonctl.api.rpc import v0_updates
    from pelotonctl.api.rpc.calls import Failed

    request = update_svc_pb2.CreateUpdateRequest()
    for name, value in case.sets.items():
        setattr(request.updateConfig, name, value)
    with pytest.raises(Failed) as refused:
        v0_updates.create(None, request)  # type: ignore[arg-type]  # refused before the call is used
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.detail.startswith(_base(case.row).split(".")[-1]), refused.value.detail
