"""Peloton's stateless job spec (v1alpha `JobSpec`, `pelotonctl` stateless files: `defaultSpec`
with `containers`, `instanceSpec`), read as the v0 job config the rest of the model knows. A
stateless job is a SERVICE job; its pod's one container is the task config, its liveness check
the health check, its entrypoint the command (a v0 `command` in the container is read when it
names no entrypoint) with its environment, its image the v0 container's docker image.

Pure: the caller (jobconfig) validates what comes out, and reports its problems under the v0
names (defaultconfig...), which this module's own problems say how to read."""

from __future__ import annotations

import shlex
from typing import Any

from peloton.model.fields import describe, mapping, text
from peloton.model.jobfields import Problems, lower_keys_deep, read_boolean
from peloton.model.taskconfig import image_name

SPEC_KEYS = ("defaultspec", "instancespec")
# The pod spec's keys that a v0 task config has too (taken as they are, and read as v0's are).
_POD_KEYS = ("constraint", "name", "labels", "restartpolicy", "preemptionpolicy", "controller",
             "killgraceperiodseconds", "revocable", "volume")
_RENAMED = {"livenesscheck": "healthcheck"}
# Pod and container fields nothing here reads: each given is named, with why.
_POD_NOT_HONOURED = {
    "initcontainers": "not run (Peloton's Mesos runtime did not run them either): the pod's container starts at once",
    "volumes": "not made: a run sees its sandbox (and, without an image, the host's file system)",
    "hostports": "not held: a run shares its host's network; give the port in the container's ports",
}
_CONTAINER_NOT_HONOURED = {
    "volumemounts": "not mounted: a run sees its sandbox (and, without an image, the host's file system)",
    "readinesscheck": "not run (Peloton did not run it either)",
}
_MESOS_NOT_HONOURED = {
    "shell": "not used: the container's v0 command says shell itself",
    "type": "not used: whether an image is given decides how a run is contained",
}


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
    """One pod spec as a v0 task config: its container's fields with the pod's."""
    fields = mapping(pod, path, problems, what="a pod spec (containers, constraint)")
    if fields is None:
        return {}
    config = {k: fields[k] for k in _POD_KEYS if k in fields}
    for key, why in _POD_NOT_HONOURED.items():
        if fields.get(key):
            problems.note(f"{path}.{key}", why)
    containers = fields.get("containers")
    if containers is None:
        _mesos_shell(fields, path, problems, entrypoint=False)
        return config
    if not isinstance(containers, list) or not containers:
        problems.add(f"{path}.containers", f"expected a list of one container, got {describe(containers)}")
        return config
    if len(containers) > 1:
        problems.add(f"{path}.containers", f"a pod runs one container here, got {len(containers)} (sidecars are "
                                           "not supported)")
    where = f"{path}.containers[0]"
    container = mapping(containers[0], where, problems, what="a container spec")
    if container is None:
        return config
    for key, value in container.items():
        config[_RENAMED.get(key, key)] = value
    for key, why in _CONTAINER_NOT_HONOURED.items():
        if config.pop(key, None):
            problems.note(f"{where}.{key}", why)
    entry = mapping(config.pop("entrypoint"), f"{where}.entrypoint", problems,
                    what="an entrypoint (value, arguments)") if "entrypoint" in config else None
    shell = _mesos_shell(fields, path, problems, entrypoint=entry is not None)
    if entry is not None:  # Peloton's field: the program and its arguments, run as given, unless the
        # pod's mesosSpec says shell: then its value is a shell command line, as Mesos ran it
        if config.pop("command", None) is not None:
            problems.note(f"{where}.command", "not used beside an entrypoint, which is the command")
        config["command"] = _entrypoint_command(entry, shell, f"{where}.entrypoint", problems)
    _environment(config, where, problems)
    _image(config, where, problems)
    if "healthcheck" in config:
        config["healthcheck"] = _liveness(config["healthcheck"], f"{where}.livenesscheck", problems)
    _note_ports(config.get("ports"), where, problems)
    return config


def _entrypoint_command(entry: dict, shell: bool, where: str, problems: Problems) -> dict:
    """The entrypoint as Mesos' CommandInfo. Run without a shell, its argv is its value followed by
    its arguments: in Mesos' form, arguments that hold the whole argv, the program first."""
    command: dict[str, Any] = {"shell": shell, **{k: entry[k] for k in ("value", "arguments") if k in entry}}
    arguments = entry.get("arguments")
    if not shell and isinstance(entry.get("value"), str) and isinstance(arguments, list):
        kept = [a for i, a in enumerate(arguments) if text(a, f"{where}.arguments[{i}]", problems) is not None]
        command["arguments"] = [entry["value"], *kept]
    return command


def _environment(config: dict, where: str, problems: Problems) -> None:
    """The container's environment, given to its command as Mesos environment variables (after the
    command's own, and winning over them)."""
    if "environment" not in config:
        return
    env = config.pop("environment")
    if not isinstance(env, list):
        problems.add(f"{where}.environment", f"expected a list of variables (name, value), got {describe(env)}")
        return
    command = config.get("command")
    if not isinstance(command, dict):
        if env and command is None:
            problems.note(f"{where}.environment", "not used: the container has no entrypoint or command to run with it")
        return  # a command that is no mapping is reported by the v0 reader
    command = {k.lower() if isinstance(k, str) else k: v for k, v in command.items()}
    own = command.get("environment")
    lowered = {k.lower(): v for k, v in own.items() if isinstance(k, str)} if isinstance(own, dict) else {}
    if own is None:
        variables: list = []
    elif "variables" in lowered and isinstance(lowered["variables"], (list, type(None))):
        variables = list(lowered["variables"] or [])
    elif isinstance(own, dict):  # a plain {NAME: value} mapping
        variables = [{"name": name, "value": value} for name, value in own.items() if value is not None]
    else:
        return  # reported by the v0 reader
    command["environment"] = {"variables": [*variables, *env]}
    config["command"] = command


def _image(config: dict, where: str, problems: Problems) -> None:
    """The container's image, run as v0's container.docker.image; a deprecated Mesos container
    beside it must name the same image, if any."""
    image = config.pop("image", None)
    if image is None or image == "":
        return
    name = image_name(image, f"{where}.image", problems)
    container = lower_keys_deep(config.get("container", {}))
    if not name or not isinstance(container, dict):
        return  # a container that is no mapping is reported by the v0 reader
    named = [n for n in (_at(container, "docker", "image"), _at(container, "mesos", "image", "docker", "name"))
             if n is not None]
    if named and name not in named:
        problems.add(f"{where}.image", f"{name!r} is not the image the container names ({describe(named[0])}): "
                                       "give one image")
    elif not named and isinstance(container.get("docker", {}), dict):
        container["docker"] = {**container.get("docker", {}), "image": name}
        config["container"] = container


def _liveness(check: Any, where: str, problems: Problems) -> Any:
    """The liveness check as v0's health check. v1alpha's command and httpGet (the names Peloton's
    Kubelet runtime read) are read as v0's commandCheck and httpCheck, which win where both are
    given (the ones Peloton's Mesos runtime read)."""
    if not isinstance(check, dict):
        return check  # reported by the v0 reader
    check = lower_keys_deep(check)
    if check.get("enabled") is not True:
        return check  # no check runs: nothing of it is read
    command = check.pop("command", None)
    if command is not None and "commandcheck" in check:
        problems.note(f"{where}.command", "not used beside commandCheck, which is read")
    elif command is not None:
        entry = mapping(command, f"{where}.command", problems, what="a command (value, arguments)") or {}
        arguments = entry.get("arguments") or []
        if not isinstance(arguments, list):
            problems.add(f"{where}.command.arguments", f"expected a list, got {describe(arguments)}")
            arguments = []
        argv = [text(a, f"{where}.command.{key}", problems) for key, a in
                [("value", entry.get("value", "")), *((f"arguments[{i}]", a) for i, a in enumerate(arguments))]]
        # Run as its argv, through the check's /bin/sh -c: each word quoted.
        check["commandcheck"] = {"command": shlex.join(a for a in argv if a is not None) if argv[0] else ""}
    http = check.pop("httpget", None)
    if http is not None and "httpcheck" in check:
        problems.note(f"{where}.httpget", "not used beside httpCheck, which is read")
    elif http is not None:
        get = mapping(http, f"{where}.httpget", problems, what="an HTTP GET (scheme, port, path)") or {}
        port = get.get("port") or _at(get, "portspec", "value")
        given = (("scheme", get.get("scheme")), ("port", port), ("path", get.get("path")))
        check["httpcheck"] = {k: v for k, v in given if v is not None}
        if get.get("httpheaders"):
            problems.note(f"{where}.httpget.httpheaders", "not sent: a check's GET carries no headers of its own")
    if check.get("successthreshold") not in (None, 0, 1):
        problems.note(f"{where}.successthreshold", "not used: the first success makes a run HEALTHY (Peloton's "
                                                   "Kubelet runtime alone read it)")
    return check


def _note_ports(ports: Any, where: str, problems: Problems) -> None:
    """A port is dynamic when its value is 0, static otherwise: a type that says otherwise, and
    Peloton's port templates ({{port.NAME}} is not filled in here), are named."""
    for i, port in enumerate(ports if isinstance(ports, list) else []):
        fields = lower_keys_deep(port) if isinstance(port, dict) else {}
        if fields.get("templatename"):
            problems.note(f"{where}.ports[{i}].templatename", "not filled in: {{port.NAME}} templates are not "
                                                              "replaced; a dynamic port's number is passed in its "
                                                              "envName")
        kind, dynamic = str(fields.get("type", "")).upper(), fields.get("value", 0) == 0
        if (kind in ("PORT_TYPE_DYNAMIC_TEMPLATE_VAR", "3") or (kind in ("PORT_TYPE_STATIC", "1") and dynamic)
                or (kind in ("PORT_TYPE_DYNAMIC_ENV_VAR", "2") and not dynamic)):
            problems.note(f"{where}.ports[{i}].type", "not used: a port is dynamic when its value is 0 (its number "
                                                      "passed in its envName), static otherwise")


def _at(tree: Any, *keys: str) -> Any:
    """tree[k1][k2]... through mappings (keys already lowercased), None where a step is missing."""
    for key in keys:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree


def _mesos_shell(pod: dict, path: str, problems: Problems, entrypoint: bool) -> bool:
    """The pod's mesosSpec: shell is honoured for an entrypoint; the rest (the container type, the
    Mesos fetcher's uris, docker parameters, a custom executor, a network spec), and shell beside a
    v0 command, which says its own, is named as not honoured."""
    if "mesosspec" not in pod:
        return False
    spec = mapping(pod["mesosspec"], f"{path}.mesosspec", problems, what="a Mesos pod spec (shell, uris, ...)")
    if spec is None:
        return False
    for key in spec:
        if key != "shell" or not entrypoint:
            problems.note(f"{path}.mesosspec.{key}", _MESOS_NOT_HONOURED.get(
                key, "not honoured: there is no Mesos fetcher, docker daemon or custom executor here"))
    return read_boolean(spec, "shell", f"{path}.mesosspec", problems)
