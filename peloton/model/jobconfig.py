"""Parse and validate a Peloton (v0) job config into immutable specs.

Pure Python: pyyaml only. The input follows Peloton's YAML job files and Peloton's job
semantics. Keys are matched case-insensitively because Peloton's Go CLI
wrote all-lowercase keys (``instancecount``) while its Python tests wrote camelCase
(``instanceCount``). Unknown keys are ignored and null values mean "absent", as in the Go CLI.

Every problem found is collected and reported at once in a single ``JobConfigError``; each
problem reads ``path: message`` where the path uses the lowercased keys of the file, e.g.
``instanceconfig.3.command.value`` or ``defaultconfig.ports[0].envname``.

Everything a later stage evaluates (resources, ports, constraints) is checked here, so
``job validate``, ``job create`` and the stages give the same answer, and no value a file can
hold (an alias bomb, .inf, a huge number) can crash or balloon a process further on.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from peloton.model.constraint import Constraint, parse_constraint
from peloton.model.fields import ROOT, is_integer
from peloton.model.fields import describe as _describe
from peloton.model.fields import join as _join
from peloton.model.fields import mapping as _mapping
from peloton.model.fields import text as _text
from peloton.model.resources import Resources
from peloton.model.safe_yaml import YamlError, YamlLimits, read_yaml

JOB_TYPES = ("BATCH", "SERVICE", "DAEMON")  # index = the enum value in Peloton's API
PLACEMENT_STRATEGIES = {1: "PACK_HOST", 2: "SPREAD_JOB"}
DEFAULT_PLACEMENT_STRATEGY = "PACK_HOST"
DEFAULT_KILL_GRACE_SECONDS = 30
MAX_TASK_FAILURES = 100  # Peloton's _maxTaskRetries
MAX_PORT = 65535
# Peloton's job manager refused jobs above max_tasks_per_job (100k by default); the limit also
# keeps one config from making us build millions of task specs.
MAX_INSTANCES = 100_000
# Integers that end up in Avro `int` fields (sla.priority goes to GangDemand.priority) must fit
# one; Peloton's own fields are uint32, so this refuses only what it would have wrapped.
MAX_AVRO_INT = 2**31 - 1
MAX_KILL_GRACE_SECONDS = 86400 * 7  # a week: longer is a mistake, not a grace period

DEFAULT_CONFIG = "defaultconfig"


@dataclass(frozen=True, slots=True)
class JobLimits:
    """The most one task may ask for. Far above any real host, they exist so that a typo or a
    hostile file (1e9 CPUs) is refused here rather than queued forever or overflowing a sum."""

    cpu: float = 1024
    mem_mb: float = 4_194_304  # 4 TiB
    disk_mb: float = 104_857_600  # 100 TiB
    gpu: float = 64
    fd: float = 1_048_576  # Linux's default ceiling on open files (fs.nr_open)


class JobConfigError(ValueError):
    """Carries every problem found, each 'path: message'."""

    HEADER = "invalid job config:"

    def __init__(self, errors: str | Iterable[str]) -> None:
        self.errors: list[str] = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join([self.HEADER, *(f"  {e}" for e in self.errors)]))


@dataclass(frozen=True, slots=True)
class PortSpec:
    name: str
    value: int  # 0 = dynamic: picked from the host's range, exported as env_name
    env_name: str


@dataclass(frozen=True, slots=True)
class CommandSpec:
    value: str
    shell: bool
    arguments: tuple[str, ...]
    # command.environment first, then docker 'env' parameters (we run without docker, so the
    # container's environment has to reach the process this way). Names are unique.
    environment: tuple[tuple[str, str], ...]
    # Mesos CommandInfo.user: the account to run as, where the agent allows it ("" the agent's).
    user: str = ""


@dataclass(frozen=True, slots=True)
class TaskSpec:
    instance: int
    name: str
    resources: Resources
    ports: tuple[PortSpec, ...]
    command: CommandSpec
    controller: bool
    max_failures: int
    kill_grace_seconds: int
    labels: tuple[tuple[str, str], ...]
    constraint: Constraint | None
    health_check: dict | None  # as written, keys lowercased; Peloton runs it only with `enabled: true`
    revocable: bool


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    type: str  # 'BATCH' | 'SERVICE' | 'DAEMON'
    instance_count: int
    owning_team: str
    owner: str
    description: str
    labels: tuple[tuple[str, str], ...]
    priority: int
    preemptible: bool
    revocable: bool
    max_running_instances: int  # 0 = all
    min_running_instances: int
    max_running_time_s: int  # 0 = unlimited
    placement_strategy: str  # 'PACK_HOST' | 'SPREAD_JOB'
    respool: str | None  # a pool path like '/respool11'
    tasks: tuple[TaskSpec, ...]  # one merged spec per instance, in instance order


# ---------------------------------------------------------------------------------------------
# Public entry points


def parse_job_config(text: str, limits: JobLimits = JobLimits(), yaml_limits: YamlLimits = YamlLimits()) -> JobSpec:
    """Parse YAML text; syntax errors and YAML limits passed become a JobConfigError naming the
    line."""
    try:
        doc = read_yaml(text, yaml_limits)
    except YamlError as exc:
        raise JobConfigError([str(exc)]) from None
    return job_spec_from_dict(doc, limits)


def job_spec_from_dict(doc: Any, limits: JobLimits = JobLimits()) -> JobSpec:
    """Validate an already-loaded document and build the JobSpec.

    The document is trusted to be a bounded tree (as load_yaml gives): no cycles, no nesting
    deeper than Python's recursion."""
    problems = _Problems()
    fields = _mapping(doc, ROOT, problems, what="a mapping of job config keys")
    if fields is None:
        problems.raise_if_any()
    return _JobReader(fields, problems, limits).read()


def gang_instances(spec: JobSpec) -> list[list[int]]:
    """Peloton's gang rule (jobmgr ConvertToResMgrGangs).

    Instances below sla.minimumRunningInstances are placed together (one gang) when that value
    is above 1, except for revocable and SERVICE jobs; every other instance is its own gang.
    """
    count = spec.instance_count
    minimum = spec.min_running_instances
    if minimum > 1 and not spec.revocable and spec.type != "SERVICE":
        gang_size = min(minimum, count)
        return [list(range(gang_size))] + [[i] for i in range(gang_size, count)]
    return [[i] for i in range(count)]


# ---------------------------------------------------------------------------------------------
# Problem collection


class _Problems:
    """Collects 'path: message' problems; identical ones are reported once with their instances.

    A defect in defaultconfig shows up in every instance that inherits it; grouping keeps a
    100k-instance job from producing 100k copies of the same line.
    """

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], list[int]] = {}

    def add(self, path: str, message: str, instance: int | None = None) -> None:
        instances = self._found.setdefault((path, message), [])
        if instance is not None:
            instances.append(instance)

    def __bool__(self) -> bool:
        return bool(self._found)

    def messages(self) -> list[str]:
        out = []
        for (path, message), instances in self._found.items():
            if not instances:
                out.append(f"{path}: {message}")
            else:
                noun = "instance" if len(instances) == 1 else "instances"
                out.append(f"{path}: {message} ({noun} {_ranges(instances)})")
        return out

    def raise_if_any(self) -> None:
        if self._found:
            raise JobConfigError(self.messages())


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5' (ids ascending)."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# ---------------------------------------------------------------------------------------------
# Typed readers: each reports a wrong type and returns a safe default, so reading goes on and
# every problem in the file gets reported in one pass.


def _sub_mapping(fields: dict, key: str, path: str, problems: _Problems) -> dict:
    """An optional nested mapping; {} when absent or wrong (the latter reported)."""
    if key not in fields:
        return {}
    return _mapping(fields[key], _join(path, key), problems) or {}


def _string(fields: dict, key: str, path: str, problems: _Problems, default: str = "") -> str:
    if key not in fields:
        return default
    text = _text(fields[key], _join(path, key), problems)
    return default if text is None else text


def _integer(
    fields: dict,
    key: str,
    path: str,
    problems: _Problems,
    default: int = 0,
    maximum: int | None = None,
) -> int:
    """A non-negative integer (Peloton's fields are uint32), at most `maximum`."""
    if key not in fields:
        return default
    value, where = fields[key], _join(path, key)
    if not is_integer(value):
        problems.add(where, f"expected an integer, got {_describe(value)}")
        return default
    if value < 0:
        problems.add(where, f"expected a non-negative integer, got {_describe(value)}")
        return default
    if maximum is not None and value > maximum:
        problems.add(where, f"must be at most {maximum}, got {_describe(value)}")
        return default
    return value


# The settings (environment variables) that raise the per-task caps.
_CAP_SETTINGS = {"cpu": "PELOTON_MAX_TASK_CPU", "mem_mb": "PELOTON_MAX_TASK_MEM_MB",
                 "disk_mb": "PELOTON_MAX_TASK_DISK_MB", "gpu": "PELOTON_MAX_TASK_GPU"}


def _amount(fields: dict, key: str, path: str, problems: _Problems, cap: float, setting: str = "") -> float | None:
    """A resource amount: a finite number in [0, cap]; 0.0 when absent, None when wrong.

    Checked before any float() so that a huge YAML integer (0x and 100k digits) is refused,
    not an OverflowError; .inf and .nan would make every sum of resources meaningless."""
    if key not in fields:
        return 0.0
    value, where = fields[key], _join(path, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.add(where, f"expected a number, got {_describe(value)}")
        return None
    if isinstance(value, float) and not math.isfinite(value):
        problems.add(where, f"expected a finite number, got {_describe(value)}")
        return None
    if value < 0:
        problems.add(where, f"expected a non-negative number, got {_describe(value)}")
        return None
    if value > cap:
        named = f", {setting}" if setting else ""
        problems.add(where, f"must be at most {_plain(cap)} (the per-task cap{named}), got {_describe(value)}")
        return None
    return float(value)


def _plain(number: float) -> str:
    """1024.0 -> '1024', 0.5 -> '0.5': a cap as a person would write it."""
    return str(int(number)) if float(number).is_integer() else str(number)


def _boolean(fields: dict, key: str, path: str, problems: _Problems, default: bool = False) -> bool:
    if key not in fields:
        return default
    value = fields[key]
    if not isinstance(value, bool):
        problems.add(_join(path, key), f"expected true or false, got {_describe(value)}")
        return default
    return value


def _list(fields: dict, key: str, path: str, problems: _Problems) -> list:
    if key not in fields:
        return []
    value = fields[key]
    if not isinstance(value, list):
        problems.add(_join(path, key), f"expected a list, got {_describe(value)}")
        return []
    return value


def _labels(fields: dict, key: str, path: str, problems: _Problems) -> tuple[tuple[str, str], ...]:
    """Peloton labels: a list of {key, value}."""
    where = _join(path, key)
    return tuple(_named_pairs(_list(fields, key, path, problems), where, "key", "value", "a label", problems))


def _named_pairs(items: list, path: str, name_field: str, value_field: str, what: str,
                 problems: _Problems) -> list[tuple[str, str]]:
    """A list of {name, value} mappings (labels, environment variables) as pairs, in order."""
    out = []
    for i, item in enumerate(items):
        pair = _mapping(item, f"{path}[{i}]", problems)
        if pair is None:
            continue
        name = _string(pair, name_field, f"{path}[{i}]", problems)
        if not name:
            problems.add(f"{path}[{i}].{name_field}", f"{what} needs a non-empty {name_field}")
            continue
        out.append((name, _string(pair, value_field, f"{path}[{i}]", problems)))
    return out


def _lower_keys_deep(value: Any) -> Any:
    """Lowercase every mapping key, recursively; values stay as they are.

    Safe on what load_yaml gives: at most 64 levels deep (well within Python's recursion), no
    cycles, and the copy, aliases expanded, at most YamlLimits.max_nodes nodes."""
    if isinstance(value, dict):
        return {
            (k.lower() if isinstance(k, str) else k): _lower_keys_deep(v)
            for k, v in value.items()
            if v is not None
        }
    if isinstance(value, list):
        return [_lower_keys_deep(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Task configs: each one (defaultconfig and every instanceconfig entry) is read on its own into
# a dict of the top-level keys it sets, so type errors are reported once, at the place written.

# Merge kinds of the top-level task-config keys (Peloton's job semantics): a zero/empty scalar
# override keeps the default; booleans, lists and messages from the override win whenever present.
_SCALAR_KEYS = ("name", "killgraceperiodseconds")


def _read_task_config(raw: Any, path: str, problems: _Problems, limits: JobLimits) -> dict[str, Any]:
    fields = _mapping(raw, path, problems)
    if fields is None:
        return {}
    read = {key: reader(fields, path, problems) for key, reader in _TASK_READERS.items() if key in fields}
    if "resource" in fields:  # the one reader that needs the per-task caps
        read["resource"] = _read_resources(fields, path, problems, limits)
    return read


# Resources field -> the file's key under `resource`.
_RESOURCE_KEYS = {"cpu": "cpulimit", "mem_mb": "memlimitmb", "disk_mb": "disklimitmb", "gpu": "gpulimit"}
_NO_RESOURCES = "a task must ask for some resource (cpulimit, memlimitmb, disklimitmb or gpulimit above 0)"


def _read_resources(fields: dict, path: str, problems: _Problems, limits: JobLimits) -> Resources:
    where = _join(path, "resource")
    res = _mapping(fields["resource"], where, problems)
    if res is None:
        return Resources()
    _amount(res, "fdlimit", where, problems, limits.fd)  # checked, but nothing here limits descriptors
    amounts = {name: _amount(res, key, where, problems, getattr(limits, name), _CAP_SETTINGS[name])
               for name, key in _RESOURCE_KEYS.items()}
    # A task asking for nothing fits on every host at once: a mistake, and a way to flood hosts.
    # A wrong amount (None) is reported already.
    if all(a == 0.0 for a in amounts.values()):
        problems.add(where, _NO_RESOURCES)
    return Resources(**{name: a or 0.0 for name, a in amounts.items()})


def _read_command(fields: dict, path: str, problems: _Problems) -> CommandSpec:
    """Mesos CommandInfo. Its environment holds command.environment only; docker env is added
    after the merge, since container and command are separate top-level keys."""
    where = _join(path, "command")
    cmd = _sub_mapping(fields, "command", path, problems)
    arguments = []
    for i, arg in enumerate(_list(cmd, "arguments", where, problems)):
        text = _text(arg, f"{where}.arguments[{i}]", problems)
        if text is not None:
            arguments.append(text)
    environment = _read_environment(cmd.get("environment"), _join(where, "environment"), problems)
    user = _string(cmd, "user", where, problems)
    if user and not _USER_NAME.fullmatch(user):
        problems.add(_join(where, "user"), f"{user!r} is not a user name (letters, digits, '_', '.', '-'; at most 32)")
        user = ""
    return CommandSpec(
        value=_string(cmd, "value", where, problems),
        shell=_boolean(cmd, "shell", where, problems, default=True),  # Mesos' default
        arguments=tuple(arguments),
        environment=environment,
        user=user,
    )


# POSIX portable user names (useradd's rule, with upper case allowed as some directories do).
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")


def _read_environment(raw: Any, path: str, problems: _Problems) -> tuple[tuple[str, str], ...]:
    """command.environment: Peloton's {variables: [{name, value}]} or a plain {NAME: value}."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        problems.add(path, f"expected a mapping, got {_describe(raw)}")
        return ()
    lowered = {k.lower(): v for k, v in raw.items() if isinstance(k, str)}
    if "variables" in lowered and isinstance(lowered["variables"], (list, type(None))):
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


def _read_env_variables(items: list, path: str, problems: _Problems) -> tuple[tuple[str, str], ...]:
    # A later definition of a name wins, as in a shell environment.
    pairs = _named_pairs(items, path, "name", "value", "an environment variable", problems)
    return tuple(dict(pairs).items())


def _read_docker_env(fields: dict, path: str, problems: _Problems) -> tuple[tuple[str, str], ...]:
    """container.docker.parameters entries {key: env, value: NAME=VALUE} as (NAME, VALUE)."""
    where = _join(path, "container")
    container = _sub_mapping(fields, "container", path, problems)
    docker = _sub_mapping(container, "docker", where, problems)
    params_path = _join(where, "docker.parameters")
    env = []
    for i, item in enumerate(_list(docker, "parameters", _join(where, "docker"), problems)):
        param = _mapping(item, f"{params_path}[{i}]", problems)
        if param is None or _string(param, "key", f"{params_path}[{i}]", problems).lower() != "env":
            continue
        name, sep, value = _string(param, "value", f"{params_path}[{i}]", problems).partition("=")
        # A bare `NAME` asks docker to pass NAME through from the host; our processes inherit
        # the host environment anyway, so there is nothing to add.
        if sep and name:
            env.append((name, value))
    return tuple(env)


def _read_raw_mapping(fields: dict, key: str, path: str, problems: _Problems) -> dict | None:
    """The health check is kept as written (keys lowercased): only `enabled` is read here."""
    if _mapping(fields[key], _join(path, key), problems) is None:
        return None
    return _lower_keys_deep(fields[key])


def _read_ports(fields: dict, path: str, problems: _Problems) -> tuple[PortSpec, ...]:
    where = _join(path, "ports")
    ports = []
    for i, item in enumerate(_list(fields, "ports", path, problems)):
        at = f"{where}[{i}]"
        port = _mapping(item, at, problems)
        if port is None:
            continue
        name = _string(port, "name", at, problems)
        value = _integer(port, "value", at, problems, maximum=MAX_PORT)
        env_name = _string(port, "envname", at, problems)
        if not name:
            problems.add(_join(at, "name"), "a port needs a name")
        raw_value = port.get("value", 0)
        dynamic = raw_value == 0 and not isinstance(raw_value, bool)  # not a mistyped value
        if dynamic and not env_name:
            problems.add(_join(at, "envname"), "a dynamic port (value 0) needs an envname")
        ports.append(PortSpec(name=name, value=value, env_name=env_name))
    return tuple(ports)


def _read_max_failures(fields: dict, path: str, problems: _Problems) -> int:
    """restartPolicy.maxFailures; above Peloton's cap of 100 it is capped, as Peloton caps it."""
    policy = _sub_mapping(fields, "restartpolicy", path, problems)
    value = _integer(policy, "maxfailures", _join(path, "restartpolicy"), problems, maximum=MAX_AVRO_INT)
    return min(value, MAX_TASK_FAILURES) if isinstance(value, int) else value


# Top-level task-config key -> reader(fields, path, problems) of its parsed value.
_TASK_READERS = {
    "name": lambda f, path, p: _string(f, "name", path, p),
    "labels": lambda f, path, p: _labels(f, "labels", path, p),
    "container": _read_docker_env,
    "command": _read_command,
    "healthcheck": lambda f, path, p: _read_raw_mapping(f, "healthcheck", path, p),
    "ports": _read_ports,
    "constraint": lambda f, path, p: parse_constraint(f["constraint"], _join(path, "constraint"), p),
    "restartpolicy": _read_max_failures,
    "killgraceperiodseconds": lambda f, path, p: _integer(
        f, "killgraceperiodseconds", path, p, maximum=MAX_KILL_GRACE_SECONDS),
    "controller": lambda f, path, p: _boolean(f, "controller", path, p),
    "revocable": lambda f, path, p: _boolean(f, "revocable", path, p),
}


# ---------------------------------------------------------------------------------------------
# Merge of an instanceconfig entry over defaultconfig (top-level keys only)

# A merged config maps each top-level key to (value, path of the config it came from), so a
# problem in the merged result can point at the place to fix.
Merged = dict[str, tuple[Any, str]]


def _merge(default: Merged, override: dict[str, Any], override_path: str) -> Merged:
    merged = dict(default)
    for key, value in override.items():
        if key in _SCALAR_KEYS and not value:
            continue  # zero or empty: keep the default
        merged[key] = (value, override_path)
    return merged


def _check_instance(instance: int, merged: Merged, job_type: str, problems: _Problems) -> None:
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


def _health_check_enabled(health_check: dict | None) -> bool:
    """Peloton runs a health check only with `enabled: true`. Its example batch job
    test_http_health.yaml carries health checks without it, so only enabled checks are
    refused for BATCH jobs."""
    return bool(health_check) and health_check.get("enabled") is True


def _task_spec(instance: int, merged: Merged) -> TaskSpec:
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
        health_check=get("healthcheck"),
        revocable=get("revocable", False),
    )


# ---------------------------------------------------------------------------------------------
# The job


class _JobReader:
    """Reads the top level of one job config; holds the shared problem list."""

    def __init__(self, fields: dict, problems: _Problems, limits: JobLimits) -> None:
        self.fields = fields
        self.problems = problems
        self.limits = limits

    def read(self) -> JobSpec:
        f, p = self.fields, self.problems
        job_type = self._job_type()
        instance_count = self._instance_count()
        sla = _sub_mapping(f, "sla", ROOT, p)
        max_running = _integer(sla, "maximumrunninginstances", "sla", p)
        min_running = _integer(sla, "minimumrunninginstances", "sla", p)
        if instance_count is not None:
            self._check_sla(instance_count, max_running, min_running)
        # Every field is read before raising, so one error lists all the problems.
        spec = dict(
            name=_string(f, "name", ROOT, p),
            type=job_type,
            instance_count=instance_count,
            owning_team=_string(f, "owningteam", ROOT, p),
            owner=_string(f, "owner", ROOT, p),
            description=_string(f, "description", ROOT, p),
            labels=_labels(f, "labels", ROOT, p),
            priority=_integer(sla, "priority", "sla", p, maximum=MAX_AVRO_INT),
            preemptible=_boolean(sla, "preemptible", "sla", p),
            revocable=_boolean(sla, "revocable", "sla", p),
            max_running_instances=max_running,
            min_running_instances=min_running,
            max_running_time_s=_integer(sla, "maxrunningtime", "sla", p, maximum=MAX_AVRO_INT),
            placement_strategy=self._placement_strategy(),
            respool=self._respool(),
        )
        default = _read_task_config(f[DEFAULT_CONFIG], DEFAULT_CONFIG, p, self.limits) if DEFAULT_CONFIG in f else {}
        overrides = self._instance_configs(instance_count)
        if instance_count is not None:
            spec["tasks"] = self._tasks(instance_count, job_type, default, overrides)
        p.raise_if_any()  # from here on instance_count is known to be valid
        return JobSpec(**spec)

    def _job_type(self) -> str:
        value = self.fields.get("type", 0)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(JOB_TYPES):
            return JOB_TYPES[value]
        if isinstance(value, str) and value.upper() in JOB_TYPES:
            return value.upper()
        self.problems.add("type", f"expected one of BATCH (0), SERVICE (1), DAEMON (2), got {_describe(value)}")
        return JOB_TYPES[0]

    def _instance_count(self) -> int | None:
        """None when invalid (already reported): per-instance checks are then skipped."""
        if "instancecount" not in self.fields:
            # Peloton's testjob_base.yaml omits it (its tests filled it in later); a job has
            # at least one instance, so a missing count means 1.
            return 1
        value = self.fields["instancecount"]
        if not is_integer(value):
            self.problems.add("instancecount", f"expected an integer, got {_describe(value)}")
            return None
        if not 1 <= value <= MAX_INSTANCES:
            self.problems.add("instancecount", f"must be between 1 and {MAX_INSTANCES}, got {_describe(value)}")
            return None
        return value

    def _check_sla(self, instance_count: int, max_running: int, min_running: int) -> None:
        if max_running > instance_count:
            self.problems.add(
                "sla.maximumrunninginstances",
                f"must not exceed instancecount ({instance_count}), got {_describe(max_running)}",
            )
        # As in Peloton, a maximum of 0 means "all instances" when checking the minimum.
        effective_max = max_running or instance_count
        if min_running > effective_max:
            limit = "maximumrunninginstances" if max_running else "instancecount"
            self.problems.add(
                "sla.minimumrunninginstances",
                f"must not exceed {limit} ({_describe(effective_max)}), got {_describe(min_running)}",
            )

    def _instance_configs(self, instance_count: int | None) -> dict[int, dict[str, Any]]:
        """instanceconfig: {instance id: task config}; ids are ints or strings of digits."""
        if "instanceconfig" not in self.fields:
            return {}
        raw = self.fields["instanceconfig"]
        if not isinstance(raw, dict):
            self.problems.add("instanceconfig", f"expected a mapping of instance ids, got {_describe(raw)}")
            return {}
        out: dict[int, dict[str, Any]] = {}
        for key, config in raw.items():
            instance = self._instance_id(key, instance_count)
            if instance is None:
                continue
            if instance in out:
                self.problems.add(f"instanceconfig.{instance}", "instance given twice")
            if config is not None:  # null: no override
                out[instance] = _read_task_config(config, f"instanceconfig.{instance}", self.problems, self.limits)
        return out

    def _instance_id(self, key: Any, instance_count: int | None) -> int | None:
        where = _join("instanceconfig", key)
        # ASCII digits only: str.isdigit() also takes '²', which int() refuses.
        if isinstance(key, str) and key.strip().isascii() and key.strip().isdigit():
            try:
                key = int(key)
            except ValueError:  # more digits than Python converts: reported as not an id below
                pass
        if not is_integer(key):
            self.problems.add(where, f"expected an instance id (an integer), got {_describe(key)}")
            return None
        # With an invalid instancecount, ids are still bounded: they end up in paths and specs.
        bound = MAX_INSTANCES if instance_count is None else instance_count
        if not 0 <= key < bound:
            self.problems.add(where, f"instance id out of range [0, {bound})")
            return None
        return key

    def _tasks(
        self,
        instance_count: int,
        job_type: str,
        default: dict[str, Any],
        overrides: dict[int, dict[str, Any]],
    ) -> tuple[TaskSpec, ...]:
        base: Merged = {key: (value, DEFAULT_CONFIG) for key, value in default.items()}
        merged_configs = {i: _merge(base, override, f"instanceconfig.{i}") for i, override in overrides.items()}
        for instance in range(instance_count):
            _check_instance(instance, merged_configs.get(instance, base), job_type, self.problems)
        if self.problems:
            return ()
        # Instances without an override share one spec, copied with their own instance id.
        template = _task_spec(0, base)
        return tuple(
            _task_spec(i, merged_configs[i]) if i in merged_configs else dataclasses.replace(template, instance=i)
            for i in range(instance_count)
        )

    def _placement_strategy(self) -> str:
        value = self.fields.get("placementstrategy", 0)
        if value == 0 and not isinstance(value, bool):
            return DEFAULT_PLACEMENT_STRATEGY  # 0 is Peloton's "unset"
        if isinstance(value, int) and not isinstance(value, bool) and value in PLACEMENT_STRATEGIES:
            return PLACEMENT_STRATEGIES[value]
        if isinstance(value, str):
            name = value.upper().removeprefix("PLACEMENT_STRATEGY_")
            if name in PLACEMENT_STRATEGIES.values():
                return name
        self.problems.add(
            "placementstrategy",
            f"expected PACK_HOST (1) or SPREAD_JOB (2), got {_describe(value)}",
        )
        return DEFAULT_PLACEMENT_STRATEGY

    def _respool(self) -> str | None:
        """respoolid: {value: /path} as in Peloton's files, or the path itself."""
        if "respoolid" not in self.fields:
            return None
        raw = self.fields["respoolid"]
        if isinstance(raw, dict):
            fields = _mapping(raw, "respoolid", self.problems) or {}
            path = _string(fields, "value", "respoolid", self.problems)
        else:
            path = _text(raw, "respoolid", self.problems) or ""
        return path or None
