"""CPU quotas for a bench's stage processes: each instance in a cgroup of its own, capped at a
share of one core (`pelotonctl bench --cpu-per-instance`).

Why: on a 2-core machine one instance of each stage and the broker already fill both cores, so a
second instance can only share them, and a run cannot tell whether it would add throughput on
machines of its own. Capped, each instance has a fixed slice of CPU, as it would on a host of its
own, and two instances of a stage have twice one's.

Linux only, as root (or with a cgroup delegated to the user): the cpu controller of cgroup v1
(`cpu.cfs_quota_us` under /sys/fs/cgroup/cpu) or of cgroup v2 (`cpu.max`). Each group is made
beside the bench's own and removed when the bench ends.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

PERIOD_US = 100_000  # the kernel's default CFS period


class CpuCapError(Exception):
    """A quota that cannot be set here: no writable cpu controller, or a bad share."""


@dataclass(frozen=True)
class Controller:
    """Where groups with a cpu quota are made: the hierarchy's mount point and its kind."""

    kind: str  # "v1" or "v2"
    root: Path

    def quota_files(self, cores: float) -> dict[str, str]:
        """The files to write in a new group, and what, for a quota of `cores` of one core."""
        quota = max(1000, round(cores * PERIOD_US))  # the kernel refuses less than 1 ms a period
        if self.kind == "v1":
            return {"cpu.cfs_period_us": str(PERIOD_US), "cpu.cfs_quota_us": str(quota)}
        return {"cpu.max": f"{quota} {PERIOD_US}"}


def find_controller(sys_root: Path = Path("/sys/fs/cgroup")) -> Controller | None:
    """The cpu controller a group can be made under, or None: v1's cpu hierarchy if mounted
    (alone or joined with cpuacct), else v2's unified one with cpu among its controllers."""
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        root = sys_root / name
        if (root / "cpu.cfs_quota_us").exists() and os.access(root, os.W_OK):
            return Controller("v1", root)
    controllers = sys_root / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split() and os.access(sys_root, os.W_OK):
        return Controller("v2", sys_root)
    return None


@dataclass
class CpuCaps:
    """Groups made by one bench run: cap() a process, throttled() what the caps held back, close()
    to remove them (their processes ended or moved back to the root group)."""

    cores: float
    controller: Controller
    prefix: str = field(default_factory=lambda: f"peloton-bench-{os.getpid()}")
    groups: dict[str, Path] = field(default_factory=dict)  # name -> its group

    @classmethod
    def make(cls, cores: float, sys_root: Path = Path("/sys/fs/cgroup")) -> CpuCaps:
        if not 0 < cores <= 64:
            raise CpuCapError(f"{cores:g} cores an instance: give a share of a core above 0 (0.1: a tenth)")
        controller = find_controller(sys_root)
        if controller is None:
            raise CpuCapError(f"no writable cgroup cpu controller under {sys_root} (root is needed, or a "
                              "delegated cgroup): the instances cannot be capped here")
        return cls(cores, controller)

    def cap(self, name: str, pid: int) -> Path:
        """Move the process (all its threads, and the children it makes later) into a new group
        of its own with the quota."""
        if self.controller.kind == "v2":
            _enable_cpu(self.controller.root)
        group = self.controller.root / f"{self.prefix}-{name}"
        try:
            group.mkdir(exist_ok=True)
            for file, value in self.controller.quota_files(self.cores).items():
                (group / file).write_text(value)
            (group / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            raise CpuCapError(f"capping {name} (pid {pid}) in {group}: {exc}") from exc
        self.groups[name] = group
        return group

    def throttled(self) -> dict[str, float]:
        """Seconds each group's processes waited for their quota: above 0 shows the cap bit."""
        out = {}
        for name, group in self.groups.items():
            stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines() if line.strip())
            out[name] = round(int(stat.get("throttled_time", 0)) / 1e9 if "throttled_time" in stat
                              else int(stat.get("throttled_usec", 0)) / 1e6, 2)
        return out

    def close(self) -> None:
        """Remove the groups; a process still in one goes back to the root group first."""
        for group in self.groups.values():
            try:
                for pid in (group / "cgroup.procs").read_text().split():
                    (self.controller.root / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # ended meanwhile
            with contextlib.suppress(OSError):  # best effort: an empty group left behind holds nothing
                group.rmdir()
        self.groups.clear()


def _enable_cpu(root: Path) -> None:
    """cgroup v2 gives a child the cpu controller only once the parent's subtree_control has it."""
    control = root / "cgroup.subtree_control"
    if "cpu" not in control.read_text().split():
        control.write_text("+cpu")
