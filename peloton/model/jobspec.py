"""A Peloton (v0) job as the rest of the system sees it once read: immutable specs, one merged
TaskSpec per instance, the limits a file is held to, and Peloton's gang rule. jobconfig.py reads
a file into these."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from peloton.model.constraint import Constraint
from peloton.model.health import HealthCheck
from peloton.model.resources import Resources

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
    # The accounts a command.user may name (PELOTON_TASK_USERS, and PELOTON_TASK_USER beside
    # them: peloton/model/users.py); None: not checked here (the agents still check).
    users: str | None = None
    default_user: str = ""


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
class VolumeSpec:
    """A task's persistent volume (Peloton's PersistentVolumeConfig): peloton/model/volumes.py."""

    container_path: str  # relative to the run's sandbox, normalised
    size_mb: int


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
    health_check: HealthCheck | None  # an enabled health check (peloton/model/health.py), else None
    revocable: bool
    image: str = ""  # the container image it runs in; "": the host's own file system
    volume: VolumeSpec | None = None  # a stateful task's persistent volume (peloton/model/volumes.py)


# Every field of a TaskSpec but its instance, as one tuple (alike compares them).
_ALL_BUT_INSTANCE = attrgetter(*[f.name for f in fields(TaskSpec)][1:])
if fields(TaskSpec)[0].name != "instance":
    raise TypeError("TaskSpec's first field must be its instance (instances_of)")


def _cloner() -> Callable[[TaskSpec, Iterable[int]], list[TaskSpec]]:
    """clone(template, instances): straight-line code that fills each new TaskSpec's slots
    through their descriptors, as a frozen dataclass's __init__ would through object.__setattr__
    (TaskSpec checks nothing at init): 1.5 us a task against 3.1 through __init__."""
    names = [f.name for f in fields(TaskSpec)]
    args = ", ".join(f"g_{n}=TaskSpec.{n}.__get__, s_{n}=TaskSpec.{n}.__set__" for n in names)
    src = (f"def clone(template, instances, new=object.__new__, cls=TaskSpec, {args}):\n"
           + "".join(f"    v_{n} = g_{n}(template)\n" for n in names[1:])
           + "    out = []\n    for i in instances:\n        o = new(cls)\n        s_instance(o, i)\n"
           + "".join(f"        s_{n}(o, v_{n})\n" for n in names[1:])
           + "        out.append(o)\n    return out\n")
    scope: dict[str, Any] = {"TaskSpec": TaskSpec}
    exec(src, scope)  # noqa: S102 (our own field names)
    return scope["clone"]


_clone = _cloner()


def instances_of(template: TaskSpec, instances: Iterable[int]) -> list[TaskSpec]:
    """The template as each of `instances`: every other field the template's own objects (which
    expand_job relies on to build a launch spec once for them all). dataclasses.replace took
    7 us a task, the dataclass's __init__ 3.1."""
    return _clone(template, instances)


def alike(a: TaskSpec, b: TaskSpec) -> bool:
    """Whether b is a as another instance (the tuples compare their items by identity first, so
    instances made by instances_of compare in C at once)."""
    return _ALL_BUT_INSTANCE(a) == _ALL_BUT_INSTANCE(b)


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
    max_unavailable_instances: int  # 0 = no budget: a drain or an update takes down as many as it needs
    placement_strategy: str  # 'PACK_HOST' | 'SPREAD_JOB'
    respool: str | None  # a pool path like '/respool11'
    tasks: tuple[TaskSpec, ...]  # one merged spec per instance, in instance order
    notices: tuple[str, ...] = ()  # 'path: why' of each field read but not honoured here


# ---------------------------------------------------------------------------------------------
# Public entry points


def gang_instances(spec: JobSpec) -> list[list[int]]:
    """Peloton's gang rule (jobmgr ConvertToResMgrGangs).

    Instances below sla.minimumRunningInstances are placed together (one gang) when that value
    is above 1, for BATCH jobs that are not revocable; every other instance is its own gang.
    """
    count = spec.instance_count
    minimum = spec.min_running_instances
    if minimum > 1 and not spec.revocable and spec.type == "BATCH":
        gang_size = min(minimum, count)
        return [list(range(gang_size))] + [[i] for i in range(gang_size, count)]
    return [[i] for i in range(count)]


# ---------------------------------------------------------------------------------------------
# Problem collection
