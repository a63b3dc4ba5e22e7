"""GPUs by grant: a run asking for N GPUs gets N that no other run holds, named to it in
CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES, and may open those alone: its devices cgroup
(cgroup v1) denies it the host's other GPUs, and a run in an image finds in its bundle the
device nodes of its own GPUs (with the driver's control devices) and no other. An agent that
restarts holds again the GPUs of the runs it adopts (GpuAllotment.hold).

A GPU is named as the agent was given it (`--gpus 0,1`, or the /dev/nvidiaN it found); its device
is <dev>/nvidia<name> when that node exists (its own major and minor), else NVIDIA's character
device 195:<name>.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

NVIDIA_MAJOR = 195
# What a run needs beside its GPUs to use any: the driver's control device and unified memory.
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


def device_number(name: str, dev: Path = Path("/dev")) -> tuple[int, int] | None:
    """(major, minor) of a GPU named `name`, or None where neither its node nor its name says."""
    try:
        info = os.stat(dev / f"nvidia{name}")
        if stat.S_ISCHR(info.st_mode):
            return os.major(info.st_rdev), os.minor(info.st_rdev)
    except OSError:
        pass
    return (NVIDIA_MAJOR, int(name)) if name.isdigit() else None


class GpuAllotment:
    """The GPUs of each host a driver runs, and which are free."""

    def __init__(self, devices: tuple[str, ...], dev: Path = Path("/dev")):
        self.devices = devices
        self.dev = dev
        self._free: dict[str, list[str]] = {}

    def free(self, host_id: str) -> int:
        return len(self._free.get(host_id, self.devices))

    def take(self, host_id: str, count: int) -> tuple[str, ...] | None:
        """`count` GPUs of the host that no run holds, or None when fewer are free."""
        if not count:
            return ()
        free = self._free.setdefault(host_id, list(self.devices))
        if len(free) < count:
            return None
        taken, free[:] = tuple(free[:count]), free[count:]
        return taken

    def hold(self, host_id: str, gpus: tuple[str, ...]) -> None:
        """GPUs a run already holds (one adopted after a restart): no other run gets them."""
        free = self._free.setdefault(host_id, list(self.devices))
        free[:] = [g for g in free if g not in gpus]

    def give_back(self, host_id: str, gpus: tuple[str, ...]) -> None:
        if gpus:
            free = self._free.setdefault(host_id, [])
            free.extend(g for g in gpus if g in self.devices and g not in free)
            free.sort(key=self.devices.index)

    def denied(self, given: tuple[str, ...]) -> tuple[str, ...]:
        """devices.deny rules (cgroup v1) for the host's GPUs a run was not given."""
        rules = []
        for name in self.devices:
            number = device_number(name, self.dev)
            if name not in given and number is not None:
                rules.append(f"c {number[0]}:{number[1]} rwm")
        return tuple(rules)

    def nodes(self, given: tuple[str, ...]) -> list[dict]:
        """OCI linux.devices entries for a run in an image: its GPUs, and the control devices the
        host has (only for a run given any GPU)."""
        if not given:
            return []
        out = []
        for name in given:
            number = device_number(name, self.dev)
            if number is not None:
                out.append(_node(f"/dev/nvidia{name}", *number))
        for name in CONTROL_DEVICES:
            try:
                info = os.stat(self.dev / name)
            except OSError:
                continue
            if stat.S_ISCHR(info.st_mode):
                out.append(_node(f"/dev/{name}", os.major(info.st_rdev), os.minor(info.st_rdev)))
        return out


def _node(path: str, major: int, minor: int) -> dict:
    return {"path": path, "type": "c", "major": major, "minor": minor, "fileMode": 0o666, "uid": 0, "gid": 0}
