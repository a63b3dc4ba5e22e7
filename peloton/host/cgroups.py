"""A task's cgroup: the kernel holds the task to its cpu, memory and pids limits, and counts what it
used. One code path for both layouts: cgroup v2 (one tree, its controllers enabled down the
tree) where it offers cpu, memory and pids, v1 (a tree per controller) otherwise.

A task's cgroup sits under a parent of the agent's own, made inside the cgroup the agent itself
runs in, so a limit on the agent's cgroup bounds its tasks too. Limits as Mesos' cgroups
isolators set them: cpu as a CFS quota of cpuLimit periods (`cpu.cfs_quota_us` / `cpu.max`),
memory as a hard limit with swap off (`memsw` = the limit, `memory.swap.max` 0), and a pids cap.
A task that goes over its memory is killed by the kernel's OOM killer; its cgroup's oom_kill
count says so, and the agent reports it with Mesos' reason REASON_CONTAINER_LIMITATION_MEMORY."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from peloton.model.usage import describe_usage

CPU_PERIOD_US = 100_000
MIN_CPU_QUOTA_US = 1_000  # the kernel's floor
# Mesos' MIN_MEMORY: its memory isolator never set a limit below it, so Peloton's job files ask
# for as little as 0.1 MB and ran. A run's memory limit here has the same floor (the scheduler
# still counts what the task asked for).
MIN_MEM_LIMIT_MB = 32.0
_MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    cpu: float = 0.0  # cores; 0: no quota
    mem_mb: float = 0.0  # 0: no limit
    pids: int = 0  # 0: no cap
    deny_devices: tuple[str, ...] = ()  # devices.deny rules ("c 195:1 rwm"): the GPUs it was not given


@dataclass(frozen=True, slots=True)
class Usage:
    cpu_seconds: float
    peak_mem_mb: float | None  # None where the kernel keeps no peak (cgroup v2 before 5.19)
    oom_killed: bool

    def describe(self) -> str:
        return describe_usage(self.cpu_seconds, self.peak_mem_mb)


class TaskCgroup(ABC):
    """The cgroup (v1: one per controller) of one task run."""

    @abstractmethod
    def procs_files(self) -> list[Path]:
        """Where the task's first process is written to enter its cgroup."""

    @abstractmethod
    def usage(self) -> Usage:
        ...

    @abstractmethod
    def pids(self) -> set[int]:
        ...

    @abstractmethod
    def directories(self) -> list[Path]:
        ...

    def enter(self, pid: int) -> None:
        for procs in self.procs_files():
            procs.write_text(str(pid))

    def destroy(self, wait_s: float = 1.0) -> None:
        """Kill whatever is left in it (a child that left the task's process group too) and remove it."""
        deadline = time.monotonic() + wait_s
        while True:
            left = self.pids()
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        for directory in self.directories():
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                time.sleep(0.05)  # the last process is still leaving
                with contextlib.suppress(OSError):
                    directory.rmdir()


class Hierarchy(ABC):
    """Where an agent's tasks' cgroups are made."""

    version: int
    controllers: tuple[str, ...]
    devices = False  # whether a task's cgroup can deny it devices (Limits.deny_devices)

    @abstractmethod
    def make(self, name: str, limits: Limits) -> TaskCgroup:
        ...

    @abstractmethod
    def at(self, path: str) -> TaskCgroup:
        """The cgroup at `path` from the root of the tree(s): one an OCI runtime made."""

    @abstractmethod
    def task(self, name: str) -> TaskCgroup:
        """The cgroup `make` made for task `name` (by this agent process or an earlier one)."""

    def leftovers(self, keep: set[str], under: str | None = None) -> list[str]:
        """The task cgroups in the agent's parent (or in the tree at `under`: an OCI runtime's
        parent) whose names are not in `keep`."""
        parents = self.parent_directories() if under is None else self.at(under).directories()
        names: set[str] = set()
        for parent in parents:
            try:
                names.update(child.name for child in parent.iterdir() if child.is_dir())
            except OSError:  # not made yet, or gone
                continue
        return sorted(names - keep)

    def describe(self) -> str:
        return f"cgroup v{self.version} ({', '.join(self.controllers)}) under {self.parent_text()}"

    @abstractmethod
    def beside(self, leaf: str) -> Hierarchy | None:
        """The same kind of hierarchy with its parent named `leaf` beside this one's, if that
        parent is there (nothing is made)."""

    @abstractmethod
    def parent_text(self) -> str:
        ...

    @abstractmethod
    def parent_directories(self) -> list[Path]:
        ...

    def close(self) -> None:
        """Remove the agent's parent cgroups, if no task's is left in them (a run left behind
        by a stopped agent keeps them, for the next agent to adopt it)."""
        for directory in self.parent_directories():
            with contextlib.suppress(OSError):
                directory.rmdir()


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path: Path) -> dict[str, int]:
    """A flat-keyed cgroup file ('key value' per line) as a mapping."""
    out = {}
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                out[key] = int(value)
    except OSError:
        pass
    return out


def _procs(path: Path) -> set[int]:
    try:
        return {int(p) for p in path.read_text().split()}
    except (OSError, ValueError):
        return set()


def _write(path: Path, value: str) -> None:
    path.write_text(value)


# -- cgroup v1 ---------------------------------------------------------------------------------
class V1Task(TaskCgroup):
    def __init__(self, dirs: dict[str, Path]):
        self.dirs = dirs  # controller -> this task's directory in its tree

    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in dict.fromkeys(self.dirs.values())]

    def directories(self) -> list[Path]:
        return list(dict.fromkeys(self.dirs.values()))

    def pids(self) -> set[int]:
        return set().union(*(_procs(f) for f in self.procs_files()))

    def usage(self) -> Usage:
        ns = _read_int(self.dirs["cpuacct"] / "cpuacct.usage") or 0
        memory = self.dirs["memory"]
        peak = _read_int(memory / "memory.memsw.max_usage_in_bytes") or _read_int(memory / "memory.max_usage_in_bytes")
        oom = _keyed(memory / "memory.oom_control").get("oom_kill", 0)
        return Usage(ns / 1e9, None if peak is None else peak / _MB, oom > 0)


class V1(Hierarchy):
    version = 1
    controllers = ("cpu", "cpuacct", "memory", "pids")

    def __init__(self, parents: dict[str, Path], mounts: dict[str, Path] | None = None):
        self.parents = parents  # controller -> the agent's parent directory in that controller's tree
        self.mounts = mounts or {}  # controller -> where its tree is mounted
        # The devices controller where the host mounts it: a task denied the GPUs it was not given.
        self.used = self.controllers + (("devices",) if "devices" in parents else ())
        self.devices = "devices" in parents

    def describe(self) -> str:
        return f"cgroup v1 ({', '.join(self.used)}) under {self.parent_text()}"

    def at(self, path: str) -> V1Task:
        return V1Task({c: self.mounts[c] / path.lstrip("/") for c in self.used if c in self.mounts})

    def task(self, name: str) -> V1Task:
        return V1Task({c: self.parents[c] / name for c in self.used})

    def parent_text(self) -> str:
        return str(self.parents["memory"])

    def parent_directories(self) -> list[Path]:
        return list(dict.fromkeys(self.parents.values()))

    def beside(self, leaf: str) -> V1 | None:
        parents = {c: p.parent / leaf for c, p in self.parents.items()}
        return V1(parents, self.mounts) if any(p.is_dir() for p in parents.values()) else None

    def make(self, name: str, limits: Limits) -> V1Task:
        dirs = {c: self.parents[c] / name for c in self.used}
        for d in dict.fromkeys(dirs.values()):
            d.mkdir(exist_ok=True)
        for rule in limits.deny_devices if "devices" in dirs else ():
            _write(dirs["devices"] / "devices.deny", rule)
        if limits.cpu > 0:
            _write(dirs["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(dirs["cpu"] / "cpu.cfs_quota_us", str(max(MIN_CPU_QUOTA_US, round(limits.cpu * CPU_PERIOD_US))))
        if limits.mem_mb > 0:
            limit = str(int(limits.mem_mb * _MB))
            _write(dirs["memory"] / "memory.limit_in_bytes", limit)
            memsw = dirs["memory"] / "memory.memsw.limit_in_bytes"
            if memsw.exists():  # swap accounting on: memory and swap together held to the limit
                _write(memsw, limit)
            else:
                _write(dirs["memory"] / "memory.swappiness", "0")
        if limits.pids > 0:
            _write(dirs["pids"] / "pids.max", str(limits.pids))
        return V1Task(dirs)


# -- cgroup v2 ---------------------------------------------------------------------------------
class V2Task(TaskCgroup):
    def __init__(self, directory: Path):
        self.directory = directory

    def procs_files(self) -> list[Path]:
        return [self.directory / "cgroup.procs"]

    def directories(self) -> list[Path]:
        return [self.directory]

    def pids(self) -> set[int]:
        return _procs(self.directory / "cgroup.procs")

    def usage(self) -> Usage:
        usec = _keyed(self.directory / "cpu.stat").get("usage_usec", 0)
        peak = _read_int(self.directory / "memory.peak")
        oom = _keyed(self.directory / "memory.events").get("oom_kill", 0)
        return Usage(usec / 1e6, None if peak is None else peak / _MB, oom > 0)


class V2(Hierarchy):
    version = 2
    controllers = ("cpu", "memory", "pids")

    def __init__(self, parent: Path, mount: Path | None = None):
        self.parent = parent
        self.mount = mount or parent

    def at(self, path: str) -> V2Task:
        return V2Task(self.mount / path.lstrip("/"))

    def task(self, name: str) -> V2Task:
        return V2Task(self.parent / name)

    def parent_text(self) -> str:
        return str(self.parent)

    def parent_directories(self) -> list[Path]:
        return [self.parent]

    def beside(self, leaf: str) -> V2 | None:
        parent = self.parent.parent / leaf
        return V2(parent, self.mount) if parent.is_dir() else None

    def make(self, name: str, limits: Limits) -> V2Task:
        d = self.parent / name
        d.mkdir(exist_ok=True)
        if limits.cpu > 0:
            _write(d / "cpu.max", f"{max(MIN_CPU_QUOTA_US, round(limits.cpu * CPU_PERIOD_US))} {CPU_PERIOD_US}")
        if limits.mem_mb > 0:
            _write(d / "memory.max", str(int(limits.mem_mb * _MB)))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
        if limits.pids > 0:
            _write(d / "pids.max", str(limits.pids))
        return V2Task(d)


# -- which one, and where --------------------------------------------------------------------
def own_cgroups(text: str) -> dict[str, str]:
    """/proc/self/cgroup as controller -> path ('' for the v2 tree)."""
    out = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        for name in names.split(",") if names else [""]:
            out[name] = path
    return out


def _inside(mount: Path, path: str) -> Path:
    return mount / path.lstrip("/")


def agent_parent_leaf(agent: str) -> str:
    """The name of the cgroup an agent's tasks' cgroups are made in (`agent`: its
    agent_cgroup_name; before 36457f0, the agent's name alone)."""
    return f"peloton-agent-{agent}"


def agent_cgroup_name(agent: str, state_dir: Path) -> str:
    """What an agent's cgroups are named by on this machine: its name and a digest of its state
    directory. Two stacks here (two developers', two test workers') may each run an agent-0, and
    one's cleanup must not remove the other's cgroups; the same agent started again keeps its
    directory, so it finds its leftovers."""
    digest = hashlib.sha1(str(state_dir.resolve()).encode()).hexdigest()[:8]
    return f"{agent}-{digest}"


def find_hierarchy(agent: str, root: Path = Path("/sys/fs/cgroup"),
                   self_cgroup: Path = Path("/proc/self/cgroup")) -> tuple[Hierarchy | None, str]:
    """The hierarchy an agent named `agent` makes its tasks' cgroups in, or None, with a sentence
    saying which and where, or why none."""
    if os.geteuid() != 0:
        return None, "cgroups off: the agent does not run as root"
    try:
        own = own_cgroups(self_cgroup.read_text())
    except OSError as exc:
        return None, f"cgroups off: {self_cgroup} unreadable ({exc.strerror})"
    leaf = agent_parent_leaf(agent)
    why_not_v2 = ""
    for mount in (root, root / "unified"):
        offered = (mount / "cgroup.controllers")
        if not offered.exists():
            continue
        have = set(offered.read_text().split())
        if not {"cpu", "memory", "pids"} <= have:
            why_not_v2 = f"cgroup v2 at {mount} offers only {', '.join(sorted(have)) or 'no controllers'}"
            continue
        try:
            return _v2(_inside(mount, own.get("", "/")), leaf, mount), ""
        except OSError as exc:
            why_not_v2 = f"cgroup v2 at {mount} not writable ({exc.strerror})"
    mounts = {c: root / c for c in V1.controllers}
    for c in V1.controllers:  # cpu and cpuacct are often one mount, cpu,cpuacct
        if not mounts[c].is_dir():
            joint = next((p for p in root.glob(f"*{c}*") if p.is_dir() and c in p.name.split(",")), None)
            if joint is None:
                return None, f"cgroups off: no cgroup v1 {c} controller under {root}" + (
                    f" ({why_not_v2})" if why_not_v2 else "")
            mounts[c] = joint
    try:
        parents = {}
        for c in V1.controllers:
            parent = _inside(mounts[c], own.get(c, "/")) / leaf
            parent.mkdir(exist_ok=True)
            parents[c] = parent
        devices = root / "devices"
        if devices.is_dir():  # optional: without it a task may open any GPU of the host
            try:
                parent = _inside(devices, own.get("devices", "/")) / leaf
                parent.mkdir(exist_ok=True)
                parents["devices"], mounts["devices"] = parent, devices
            except OSError:
                pass
        memory = parents["memory"]
        if (memory / "memory.use_hierarchy").exists() and _read_int(memory / "memory.use_hierarchy") == 0:
            _write(memory / "memory.use_hierarchy", "1")  # a task's usage counts in its parents
    except OSError as exc:
        return None, f"cgroups off: cannot make the agent's cgroups ({exc.strerror})"
    note = f" ({why_not_v2})" if why_not_v2 else ""
    return V1(parents, mounts), note


def _v2(own: Path, leaf: str, mount: Path) -> V2:
    """v2: controllers must be enabled in every parent's subtree_control down to the tasks, and a
    cgroup with processes may not enable them for its children, so the tasks' parent is a
    sibling-free child of the agent's cgroup that holds no process itself."""
    parent = own / leaf
    parent.mkdir(exist_ok=True)
    for d in (own, parent):
        enabled = set((d / "cgroup.subtree_control").read_text().split())
        missing = " ".join(f"+{c}" for c in V2.controllers if c not in enabled)
        if not missing:
            continue
        try:
            _write(d / "cgroup.subtree_control", missing)
        except OSError:
            if d != own:
                raise
            # The agent's own cgroup holds the agent: it moves to a leaf of its own first.
            me = own / "peloton-agent-self"
            me.mkdir(exist_ok=True)
            _write(me / "cgroup.procs", str(os.getpid()))
            _write(d / "cgroup.subtree_control", missing)
    return V2(parent, mount)


def memory_limit_mb(asked_mb: float) -> float:
    """The memory limit of a run that asked for `asked_mb` (0: none), at least Mesos' floor."""
    return max(asked_mb, MIN_MEM_LIMIT_MB) if asked_mb > 0 else 0.0
