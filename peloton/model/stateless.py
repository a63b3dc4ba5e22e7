"""Peloton's stateless job spec (v1alpha `JobSpec`, `pelotonctl` stateless files: `defaultSpec`
with `containers`, `instanceSpec`), read as the v0 job config the rest of the model knows. A
stateless job is a SERVICE job; its pod's one container is the task config, its liveness check
the health check, its entrypoint the command (a v0 `command` in the container is read when it
names no entrypoint).

Pure: the caller (jobconfig) validates what comes out, and reports its problems under the v0
names (defaultconfig...), which this module's own problems say how to read."""

from __future__ import annotations

from typing import Any

from peloton.model.fields import describe, mapping
from peloton.model.jobfields import Problems

SPEC_KEYS = ("defaultspec", "instancespec")
# The pod spec's keys that a v0 task config has too (taken as they are).
_POD_KEYS = ("constraint", "name")
_RENAMED = {"livenesscheck": "healthcheck"}


def is_stateless(fields: dict) -> bool:
    """A top level (lowercased keys) in the stateless spec's shape."""
    return any(key in fields for key in SPEC_KEYS)


def as_v0(fields: dict, problems: Problems) -> dict:
    """The v0 job config this stateless spec says; `type` SERVICE, `defaultSpec` as
    `defaultConfig`, `instanceSpec` as `instanceConfig`."""
    out = {k: v for k, v in fields.items() if k not in SPEC_KEYS and k not in ("defaultconfig", "instanceconfig")}
    for v0 in ("defaultconfig", "instanceconfig"):
        if v0 in fields:
            problems.add(v0, "a stateless job spec (defaultSpec, instanceSpec) cannot also have a v0 " + v0)
    kind = fields.get("type", "SERVICE")
    if kind not in ("SERVICE", "service", 1):
        problems.add("type", f"a stateless job spec (defaultSpec) is a SERVICE job, got {describe(kind)}")
    out["type"] = "SERVICE"
    if "defaultspec" in fields:
        out["defaultconfig"] = _task_config(fields["defaultspec"], "defaultspec", problems)
    if "instancespec" in fields:
        raw = fields["instancespec"]
        if isinstance(raw, dict):
            out["instanceconfig"] = {key: _task_config(pod, f"instancespec.{key}", problems)
                                     for key, pod in raw.items() if pod is not None}
        else:
            problems.add("instancespec", f"expected a mapping of instance ids to pod specs, got {describe(raw)}")
    return out


def _task_config(pod: Any, path: str, problems: Problems) -> dict:
    """One pod spec as a v0 task config: its container's fields with the pod's constraint."""
    fields = mapping(pod, path, problems, what="a pod spec (containers, constraint)")
    if fields is None:
        return {}
    config = {k: fields[k] for k in _POD_KEYS if k in fields}
    containers = fields.get("containers")
    if containers is None:
        return config
    if not isinstance(containers, list) or not containers:
        problems.add(f"{path}.containers", f"expected a list of one container, got {describe(containers)}")
        return config
    if len(containers) > 1:
        problems.add(f"{path}.containers", f"a pod runs one container here, got {len(containers)} (sidecars are "
                                           "not supported)")
    container = mapping(containers[0], f"{path}.containers[0]", problems, what="a container spec")
    if container is None:
        return config
    for key, value in container.items():
        config[_RENAMED.get(key, key)] = value
    entry = mapping(config.pop("entrypoint"), f"{path}.containers[0].entrypoint", problems,
                    what="an entrypoint (value, arguments)") if "entrypoint" in config else None
    if entry is not None:  # Peloton's field: the program and its arguments, run as given, unless the
        # pod's mesosSpec says shell: then its value is a shell command line, as Mesos ran it
        config["command"] = {"shell": _mesos_shell(fields, path, problems), **entry}
    return config


def _mesos_shell(pod: dict, path: str, problems: Problems) -> bool:
    """The pod's mesosSpec: shell is honoured; the rest (the Mesos fetcher's uris, docker
    parameters, a custom executor, a network spec) is named as not honoured."""
    if "mesosspec" not in pod:
        return False
    spec = mapping(pod["mesosspec"], f"{path}.mesosspec", problems, what="a Mesos pod spec (shell, uris, ...)")
    if spec is None:
        return False
    for key in spec:
        if key not in ("shell", "type"):  # the container type is the image's, here
            problems.note(f"{path}.mesosspec.{key}", "not honoured: there is no Mesos fetcher, docker daemon or "
                                                     "custom executor here")
    return spec.get("shell") is True
