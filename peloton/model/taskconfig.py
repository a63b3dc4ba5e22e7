"""Task configs: defaultconfig and every instanceconfig entry, each read on its own into the
top-level keys it sets (so a type error is reported once, where it was written), merged as
Peloton merges them, checked per instance, and turned into one TaskSpec per instance."""

from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import Any

from peloton.model.constraint import parse_constraint
from peloton.model.fields import describe as _describe
from peloton.model.fields import join as _join
from peloton.model.fields import mapping as _mapping
from peloton.model.fields import text as _text
from peloton.model.health import parse_health_check
from peloton.model.jobfields import (
    Problems,
    lower_keys_deep,
    read_amount,
    read_boolean,
    read_integer,
    read_labels,
    read_list,
    read_mapping,
    read_named_pairs,
    read_string,
)
from peloton.model.jobspec import (
    DEFAULT_CONFIG,
    DEFAULT_KILL_GRACE_SECONDS,
    MAX_AVRO_INT,
    MAX_KILL_GRACE_SECONDS,
    MAX_PORT,
    MAX_TASK_FAILURES,
    CommandSpec,
    JobLimits,
    PortSpec,
    TaskSpec,
)
from peloton.model.resources import Resources
from peloton.model.users import user_problem
from peloton.model.volumes import MAX_SIZE_MB as MAX_VOLUME_MB
from peloton.model.volumes import VolumeSpec, container_path_problem

# The settings (environment variables) that raise the per-task caps.
_CAP_SETTINGS = {"cpu": "PELOTON_MAX_TASK_CPU", "mem_mb": "PELOTON_MAX_TASK_MEM_MB",
                 "disk_mb": "PELOTON_MAX_TASK_DISK_MB", "gpu": "PELOTON_MAX_TASK_GPU"}


# Merge kinds of the top-level task-config keys (Peloton's job semantics): a zero/empty scalar
# override keeps the default; booleans, lists and messages from the override win whenever present.
_SCALAR_KEYS = ("name", "killgraceperiodseconds")


def read_task_config(raw: Any, path: str, problems: Problems, limits: JobLimits) -> dict[str, Any]:
    fields = _mapping(raw, path, problems)
    if fields is None:
        return {}
    read: dict[str, Any] = {key: reader(fields, path, problems) for key, reader in _TASK_READERS.items()
            if key in fields or (key == "image" and "container" in fields)}
    if "resource" in fields:  # the one reader that needs the per-task caps
        read["resource"] = _read_resources(fields, path, problems, limits)
    user = read["command"].user if "command" in read else ""
    if user and limits.users is not None:  # what no host of the cluster would run it as
        problem = user_problem(user, limits.users, limits.default_user)
        if problem:
            problems.add(_join(_join(path, "command"), "user"), problem)
    _note_unhonoured(fields, path, problems)
    return read


# Task-config fields Peloton honours and this scheduler reads but does not (yet): each is named
# with its path when a job carries it (`job validate`, `job create`), never dropped in silence.
_NOT_HONOURED = {
    "executor": "not used: a task runs as a command (Mesos' command executor), not under a custom executor",
    "preemptionpolicy": "not used: a preempted run is always run again (Peloton's killOnPreempt: false)",
    "revocable": "not used per task: the job's sla.revocable decides whether its tasks are revocable",
}
# The container's fields nothing reads (its image, its type and its docker env parameters are
# read below): each given is named, unless its value asks for what a run gets here anyway.
_CONTAINER_NOT_HONOURED = {
    ("volumes",): "not mounted: a task sees its sandbox (and, without an image, the host's file system)",
    ("hostname",): "not set: a run has its host's hostname",
    ("docker", "network"): "not used: a run shares its host's network (Docker's HOST)",
    ("docker", "portmappings"): "not used: a run shares its host's network; its ports are given in ports",
    ("docker", "privileged"): "not used: a run is never privileged",
    ("docker", "forcepullimage"): "not used: nothing is pulled; the image must have been imported on the host",
    ("docker", "volumedriver"): "not used: nothing is mounted",
    ("mesos", "image", "type"): "not used: only a docker image (mesos.image.docker.name) is run",
    ("mesos", "image", "appc"): "not used: only a docker image (mesos.image.docker.name) is run",
    ("mesos", "image", "cached"): "not used: nothing is pulled; the image must have been imported on the host",
    ("mesos", "image", "docker", "credential"): "not used: nothing is pulled",
    ("mesos", "image", "docker", "config"): "not used: nothing is pulled",
    ("networkinfos",): "not used: a run shares its host's network",
    ("linuxinfo",): "not used: a run gets no capabilities or namespaces beyond its account's",
    ("rlimitinfo",): "not set: a run has its agent's resource limits (beyond cpu, memory, disk and processes)",
    ("ttyinfo",): "not used: a run has no terminal",
}
# Values (as upper-case text) that ask for what a run gets here anyway: not named.
_CONTAINER_AS_HERE = {("docker", "network"): {"HOST", "1"}, ("docker", "privileged"): {"FALSE"},
                      ("docker", "forcepullimage"): {"FALSE"}, ("mesos", "image", "type"): {"DOCKER", "2"},
                      ("mesos", "image", "cached"): {"TRUE"}}


def _note_unhonoured(fields: dict, path: str, problems: Problems) -> None:
    for key, why in _NOT_HONOURED.items():
        if key in fields:
            problems.note(_join(path, key), why)
    container = lower_keys_deep(fields.get("container"))
    for keys, why in _CONTAINER_NOT_HONOURED.items():
        value = _at(container, *keys)
        if value in (None, "", [], {}) or str(value).upper() in _CONTAINER_AS_HERE.get(keys, ()):
            continue
        problems.note(_join(path, "container." + ".".join(keys)), why)
    health = lower_keys_deep(fields.get("healthcheck"))
    if _at(health, "enabled") is True and _at(health, "commandcheck", "unshareenvironments") is True:
        problems.note(_join(path, "healthcheck.commandcheck.unshareenvironments"),
                      "not used: the check always sees the run's environment")


# Resources field -> the file's key under `resource`.
_RESOURCE_KEYS = {"cpu": "cpulimit", "mem_mb": "memlimitmb", "disk_mb": "disklimitmb", "gpu": "gpulimit"}
_NO_RESOURCES = "a task must ask for some resource (cpulimit, memlimitmb, disklimitmb or gpulimit above 0)"


def _read_resources(fields: dict, path: str, problems: Problems, limits: JobLimits) -> Resources:
    where = _join(path, "resource")
    res = _mapping(fields["resource"], where, problems)
    if res is None:
        return Resources()
    if read_amount(res, "fdlimit", where, problems, limits.fd):  # checked; 0 asks for no limit
        problems.note(_join(where, "fdlimit"), "not set: a run has its agent's limit on open files")
    amounts = {name: read_amount(res, key, where, problems, getattr(limits, name), _CAP_SETTINGS[name])
               for name, key in _RESOURCE_KEYS.items()}
    # A task asking for nothing fits on every host at once: a mistake, and a way to flood hosts.
    # A wrong amount (None) is reported already.
    if all(a == 0.0 for a in amounts.values()):
        problems.add(where, _NO_RESOURCES)
    return Resources(**{name: a or 0.0 for name, a in amounts.items()})


def _read_command(fields: dict, path: str, problems: Problems) -> CommandSpec:
    """Mesos CommandInfo. Its environment holds command.environment only; docker env is added
    after the merge, since container and command are separate top-level keys."""
    where = _join(path, "command")
    cmd = read_mapping(fields, "command", path, problems)
    arguments = []
    for i, arg in enumerate(read_list(cmd, "arguments", where, problems)):
        text = _text(arg, f"{where}.arguments[{i}]", problems)
        if text is not None:
            arguments.append(text)
    environment = _read_environment(cmd.get("environment"), _join(where, "environment"), problems)
    user = read_string(cmd, "user", where, problems)
    if user and not _USER_NAME.fullmatch(user):
        problems.add(_join(where, "user"), f"{user!r} is not a user name (letters, digits, '_', '.', '-'; at most 32)")
        user = ""
    value = read_string(cmd, "value", where, problems)
    shell = read_boolean(cmd, "shell", where, problems, default=True)  # Mesos' default
    if not shell and arguments:
        # Mesos' CommandInfo: without a shell, value is the program and arguments its whole argv,
        # argv[0] first. A CommandSpec's arguments follow its program, which is argv[0] here.
        if arguments[0] not in (value, posixpath.basename(value)):
            problems.note(f"{where}.arguments[0]", f"not used as argv[0]: a run's argv[0] is its program ({value!r}) "
                                                   "here; the arguments after it are passed as given")
        arguments = arguments[1:]
    if cmd.get("uris"):
        problems.note(_join(where, "uris"), "not fetched: no Mesos fetcher: nothing is downloaded into the sandbox")
    return CommandSpec(
        value=value,
        shell=shell,
        arguments=tuple(arguments),
        environment=environment,
        user=user,
    )


# POSIX portable user names (useradd's rule, with upper case allowed as some directories do).
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")


def _read_environment(raw: Any, path: str, problems: Problems) -> tuple[tuple[str, str], ...]:
    """command.environment: Peloton's {variables: [{name, value}]} or a plain {NAME: value}."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        problems.add(path, f"expected a mapping, got {_describe(raw)}")
        return ()
    lowered = {k.lower(): v for k, v in raw.items() if isinstance(k, str)}
    if "variables" in lowered and isinstance(lowered["variables"], (list, type(None))):
        _refuse_secrets(lowered["variables"] or [], _join(path, "variables"), problems)
        return _read_env_variables(lowered["variables"] or [], _join(path, "variables"), problems)
    # A plain mapping: the names are user data, so they keep their case.
    env: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            problems.add(path, f"expected variable names as strings, got {_describe(name)}")
            continue
        if value is not None:
            text = _text(value, _join(path, name), problems)
            if text is not None:
                env[name] = text
    return tuple(env.items())


def _refuse_secrets(items: list, path: str, problems: Problems) -> None:
    """Mesos' SECRET variables take their value from a secret store, of which there is none here:
    run as if absent, such a variable would reach the task empty."""
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue  # reported by _read_env_variables
        variable = {k.lower(): v for k, v in item.items() if isinstance(k, str) and v is not None}
        kind = str(variable.get("type", "VALUE")).upper()
        if kind in ("SECRET", "2"):
            problems.add(f"{path}[{i}].type", "a SECRET variable is not supported: there is no secret store here, "
                                              "and the run would get no value; give its value (type VALUE)")
        elif kind not in ("VALUE", "1", "UNKNOWN", "0"):
            problems.add(f"{path}[{i}].type", f"expected VALUE or SECRET, got {_describe(variable['type'])}")
        elif "secret" in variable:
            problems.add(f"{path}[{i}].secret", "a secret is for a SECRET variable, which is not supported here "
                                                "(there is no secret store); give the value in value")


def _read_env_variables(items: list, path: str, problems: Problems) -> tuple[tuple[str, str], ...]:
    # A later definition of a name wins, as in a shell environment.
    pairs = read_named_pairs(items, path, "name", "value", "an environment variable", problems)
    return tuple(dict(pairs).items())


def _read_docker_env(fields: dict, path: str, problems: Problems) -> tuple[tuple[str, str], ...]:
    """container.docker.parameters entries {key: env, value: NAME=VALUE} as (NAME, VALUE)."""
    where = _join(path, "container")
    container = read_mapping(fields, "container", path, problems)
    docker = read_mapping(container, "docker", where, problems)
    params_path = _join(where, "docker.parameters")
    env = []
    for i, item in enumerate(read_list(docker, "parameters", _join(where, "docker"), problems)):
        param = _mapping(item, f"{params_path}[{i}]", problems)
        if param is None:
            continue
        key = read_string(param, "key", f"{params_path}[{i}]", problems)
        if key.lower() != "env":
            problems.note(f"{params_path}[{i}].key", f"not used: {key!r} is a docker run option, and there is no "
                                                      "docker daemon here (only key env is read: a variable of the "
                                                      "run's environment)")
            continue
        name, sep, value = read_string(param, "value", f"{params_path}[{i}]", problems).partition("=")
        # A bare `NAME` asks docker to pass NAME through from the host; our processes inherit
        # the host environment anyway, so there is nothing to add.
        if sep and name:
            env.append((name, value))
    return tuple(env)


def _at(tree: Any, *keys: str) -> Any:
    """tree[k1][k2]... through mappings (keys already lowercased), None where a step is missing."""
    for key in keys:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree


def _read_image(fields: dict, path: str, problems: Problems) -> str:
    """The image a task runs in: container.docker.image, or a mesos container's image by its
    docker name (Peloton's mesos containerizer); where both are given, the container's type
    (DOCKER 1, MESOS 2) says which, docker.image without one. Empty: the host's own file system.
    Either runs under this scheduler's own runtime."""
    container = lower_keys_deep(fields.get("container"))
    where = _join(path, "container")
    forms = [("docker", "image"), ("mesos", "image", "docker", "name")]
    kind = _at(container, "type")
    if kind is not None and str(kind).upper() in ("MESOS", "2"):
        forms.reverse()
    elif kind is not None and str(kind).upper() not in ("DOCKER", "1"):
        problems.add(_join(where, "type"), f"expected DOCKER (1) or MESOS (2), got {_describe(kind)}")
    for keys in forms:
        name = _at(container, *keys)
        if name is not None:
            return image_name(name, _join(where, ".".join(keys)), problems)
    return ""


# An image reference as docker writes one: [registry/]name[:tag][@digest], no spaces or slashes at the ends.
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")


def image_name(value: Any, path: str, problems: Problems) -> str:
    if not isinstance(value, str) or not _IMAGE.fullmatch(value) or ".." in value or value.endswith("/"):
        problems.add(path, f"expected an image name like debian:bookworm, got {_describe(value)}")
        return ""
    return value


def _read_raw_mapping(fields: dict, key: str, path: str, problems: Problems) -> dict | None:
    """The health check is kept as written (keys lowercased): only `enabled` is read here."""
    if _mapping(fields[key], _join(path, key), problems) is None:
        return None
    return lower_keys_deep(fields[key])


def _read_ports(fields: dict, path: str, problems: Problems) -> tuple[PortSpec, ...]:
    where = _join(path, "ports")
    ports = []
    for i, item in enumerate(read_list(fields, "ports", path, problems)):
        at = f"{where}[{i}]"
        port = _mapping(item, at, problems)
        if port is None:
            continue
        name = read_string(port, "name", at, problems)
        value = read_integer(port, "value", at, problems, maximum=MAX_PORT)
        env_name = read_string(port, "envname", at, problems)
        if not name:
            problems.add(_join(at, "name"), "a port needs a name")
        raw_value = port.get("value", 0)
        dynamic = raw_value == 0 and not isinstance(raw_value, bool)  # not a mistyped value
        if dynamic and not env_name:
            problems.add(_join(at, "envname"), "a dynamic port (value 0) needs an envname")
        ports.append(PortSpec(name=name, value=value, env_name=env_name))
    return tuple(ports)


def _read_max_failures(fields: dict, path: str, problems: Problems) -> int:
    """restartPolicy.maxFailures; above Peloton's cap of 100 it is capped, as Peloton caps it."""
    policy = read_mapping(fields, "restartpolicy", path, problems)
    value = read_integer(policy, "maxfailures", _join(path, "restartpolicy"), problems, maximum=MAX_AVRO_INT)
    return min(value, MAX_TASK_FAILURES) if isinstance(value, int) else value


def _read_volume(fields: dict, path: str, problems: Problems) -> VolumeSpec | None:
    """Peloton's PersistentVolumeConfig: containerPath (in the sandbox) and sizeMB."""
    where = _join(path, "volume")
    volume = read_mapping(fields, "volume", path, problems)
    if volume is None:
        return None
    container_path = read_string(volume, "containerpath", where, problems)
    size = read_integer(volume, "sizemb", where, problems, maximum=MAX_VOLUME_MB)
    problem = container_path_problem(container_path) if isinstance(container_path, str) else None
    if problem:
        problems.add(_join(where, "containerpath"), problem)
    if isinstance(size, int) and size <= 0:
        problems.add(_join(where, "sizemb"), "a volume needs a size above 0 MB")
    if problem or not isinstance(container_path, str) or not isinstance(size, int) or size <= 0:
        return None
    return VolumeSpec(container_path, size)


# Top-level task-config key -> reader(fields, path, problems) of its parsed value.
_TASK_READERS = {
    "name": lambda f, path, p: read_string(f, "name", path, p),
    "labels": lambda f, path, p: read_labels(f, "labels", path, p),
    "container": _read_docker_env,
    "image": lambda f, path, p: _read_image(f, path, p),
    "command": _read_command,
    "healthcheck": lambda f, path, p: _read_raw_mapping(f, "healthcheck", path, p),
    "ports": _read_ports,
    "constraint": lambda f, path, p: parse_constraint(f["constraint"], _join(path, "constraint"), p),
    "restartpolicy": _read_max_failures,
    "killgraceperiodseconds": lambda f, path, p: read_integer(
        f, "killgraceperiodseconds", path, p, maximum=MAX_KILL_GRACE_SECONDS),
    "controller": lambda f, path, p: read_boolean(f, "controller", path, p),
    "revocable": lambda f, path, p: read_boolean(f, "revocable", path, p),
    "volume": lambda f, path, p: _read_volume(f, path, p),
}


# ---------------------------------------------------------------------------------------------
# Merge of an instanceconfig entry over defaultconfig (top-level keys only)

# A merged config maps each top-level key to (value, path of the config it came from), so a
# problem in the merged result can point at the place to fix.
Merged = dict[str, tuple[Any, str]]


def merge_over_default(default: Merged, override: dict[str, Any], override_path: str) -> Merged:
    merged = dict(default)
    for key, value in override.items():
        if key in _SCALAR_KEYS and not value:
            continue  # zero or empty: keep the default
        merged[key] = (value, override_path)
    return merged


def check_instance(instance: int, merged: Merged, job_type: str, problems: Problems) -> None:
    """Rules on the merged config of one instance."""

    def add(origin: str, suffix: str, message: str) -> None:
        # Problems inherited from defaultconfig are grouped and list the instances hit.
        problems.add(f"{origin}.{suffix}", message, instance if origin == DEFAULT_CONFIG else None)

    if "resource" not in merged:
        add(DEFAULT_CONFIG, "resource", _NO_RESOURCES)

    command = merged.get("command")
    if command is None:
        add(DEFAULT_CONFIG, "command", "every instance needs a command with a non-empty value")
    elif not command[0].value.strip():
        add(command[1], "command.value", "every instance needs a non-empty command value")

    controller = merged.get("controller")
    if controller and controller[0] and instance != 0:
        add(controller[1], "controller", "only instance 0 may be the controller")

    health = merged.get("healthcheck")
    if job_type == "BATCH" and health and _health_check_enabled(health[0]):
        add(health[1], "healthcheck", "BATCH tasks may not have an enabled health check")
    elif health:
        for where, message in parse_health_check(health[0])[1]:
            add(health[1], where, message)


def _health_check_enabled(health_check: dict | None) -> bool:
    """Peloton runs a health check only with `enabled: true`. Its example batch job
    test_http_health.yaml carries health checks without it, so only enabled checks are
    refused for BATCH jobs."""
    if not health_check:
        return False
    return health_check.get("enabled") is True


def task_spec(instance: int, merged: Merged) -> TaskSpec:
    def get(key: str, default: Any = None) -> Any:
        return merged[key][0] if key in merged else default

    command: CommandSpec = get("command")
    # Docker env parameters come after command.environment and win on a clash.
    environment = dict(command.environment)
    environment.update(get("container", ()))
    return TaskSpec(
        instance=instance,
        name=get("name", ""),
        resources=get("resource", Resources()),
        ports=get("ports", ()),
        command=dataclasses.replace(command, environment=tuple(environment.items())),
        controller=get("controller", False),
        max_failures=get("restartpolicy", 0),
        kill_grace_seconds=get("killgraceperiodseconds") or DEFAULT_KILL_GRACE_SECONDS,
        labels=get("labels", ()),
        constraint=get("constraint"),
        health_check=parse_health_check(get("healthcheck"))[0],
        revocable=get("revocable", False),
        image=get("image", ""),
        volume=get("volume"),
    )


# ---------------------------------------------------------------------------------------------
# The job
