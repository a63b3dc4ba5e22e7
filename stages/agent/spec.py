"""What a host agent offers: each host's name, capacity, labels and port ranges, read from the
command line (pelotonctl agent) with every bad value named."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from peloton.model.resources import Resources

HOST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class AgentSpec:
    name: str
    capacity: Resources
    labels: dict[str, str]
    port_ranges: tuple[tuple[int, int], ...] = ((31000, 32000),)


def parse_port_ranges(text: str) -> tuple[tuple[int, int], ...]:
    """31000-32000[,33000-33100] (inclusive)."""
    ranges = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        low, sep, high = item.partition("-")
        try:
            low_n, high_n = int(low), int(high if sep else low)
        except ValueError:
            raise ValueError(f"{item!r} is not a port range like 31000-32000") from None
        if not 1 <= low_n <= high_n <= 65535:
            raise ValueError(f"{item!r}: expected 1 <= low <= high <= 65535")
        ranges.append((low_n, high_n))
    if not ranges:
        raise ValueError("no port range given")
    return tuple(ranges)


def gpu_devices(given: str | None, capacity: Resources, dev: Path = Path("/dev")) -> tuple[tuple[str, ...], Resources]:
    """The host's GPU devices, and its capacity with their count: named (`--gpus 0,1`), else the
    NVIDIA devices under /dev, else as many as the capacity's gpu numbered from 0 (devices no
    driver checks: for tests, or a host whose devices are named otherwise). ValueError when the
    devices named or found and the capacity's gpu disagree."""
    if given is not None:
        devices = tuple(d.strip() for d in given.split(",") if d.strip())
        if len(set(devices)) != len(devices):
            raise ValueError(f"--gpus {given!r} names a device twice")
        source = "--gpus names"
    else:
        devices = tuple(sorted((p.name[len("nvidia"):] for p in dev.glob("nvidia[0-9]*")
                                if p.name[len("nvidia"):].isdigit()), key=int))
        source = f"{dev} has"
        if not devices:
            return tuple(str(i) for i in range(int(capacity.gpu))), capacity
    if capacity.gpu and capacity.gpu != len(devices):
        raise ValueError(f"{source} {len(devices)} GPU devices but the resources say gpu={capacity.gpu:g}")
    return devices, replace(capacity, gpu=float(len(devices)))


def parse_resources(text: str) -> Resources:
    """cpu=8,mem_mb=16384,disk_mb=100000,gpu=0 (missing kinds are 0)."""
    values = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = item.partition("=")
        if name not in ("cpu", "mem_mb", "disk_mb", "gpu"):
            raise ValueError(f"unknown resource {name!r} (known: cpu, mem_mb, disk_mb, gpu)")
        try:
            values[name] = float(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not a number") from None
        if not values[name] >= 0 or values[name] == float("inf"):
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return Resources(**values)
