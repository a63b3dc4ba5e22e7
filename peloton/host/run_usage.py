"""What each run on a host uses now, measured: its cpu (cores) and resident memory, as Mesos'
resource estimator reads a container's. The host manager lends what non-revocable runs hold but do
not use to revocable ones, and takes it back when their use grows (docs/concepts/hosts-and-agents.md).

A run is its process group (its executor leads it): one /proc scan reads every group's members.
Cpu is the group's cpu time (its members' own and that of the children they waited for) over the
time between two measurements; the rate said is the highest of the last few, so a run that
bursts keeps its cpu counted for a while rather than lending it out between bursts."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

WINDOW = 5  # measurements whose highest rate is said (heartbeats: about five seconds)

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_MB = (os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096) / (1024 * 1024)


@dataclass(slots=True)
class GroupUse:
    cpu_seconds: float = 0.0  # cumulative
    mem_mb: float = 0.0  # resident now


def groups_use(pgids: set[int]) -> dict[int, GroupUse]:
    """Cpu seconds and resident memory of each of these process groups, from one /proc scan."""
    found: dict[int, GroupUse] = {}
    if not pgids:
        return found
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
            fields = raw.rsplit(b")", 1)[1].split()
            pgrp = int(fields[2])
            if pgrp not in pgids:
                continue
            ticks = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
            rss = int(fields[21])
        except (OSError, IndexError, ValueError):
            continue  # gone between the listing and the read, or not a process we can read
        use = found.setdefault(pgrp, GroupUse())
        use.cpu_seconds += ticks / _TICKS
        use.mem_mb += rss * _PAGE_MB
    return found


class UsageMeter:
    """Each run's cpu rate (the highest of the last WINDOW measurements) and memory, measured
    every time measure() is called; a run measured only once so far is not said yet."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self._last: dict[str, tuple[float, float]] = {}  # task id -> (when, cpu seconds)
        self._rates: dict[str, deque[float]] = {}

    def measure(self, groups: Mapping[str, int], now: float,
                cpu_seconds: Mapping[str, float] | None = None) -> dict[str, tuple[float, float]]:
        """Task id -> (cores, resident MB), for the runs in `groups` (task id -> process group).
        `cpu_seconds`: a run's cumulative cpu where something better than its group knows it (its
        cgroup counts children that left the group too)."""
        used = groups_use(set(groups.values()))
        said: dict[str, tuple[float, float]] = {}
        for task_id, pgid in groups.items():
            use = used.get(pgid)
            if use is None:
                continue
            seconds = cpu_seconds.get(task_id, use.cpu_seconds) if cpu_seconds else use.cpu_seconds
            last = self._last.get(task_id)
            self._last[task_id] = (now, seconds)
            if last is None or now <= last[0]:
                continue
            # A member that ends moves its time to the parent that waits for it: a dip, not a rate.
            rate = max(0.0, (seconds - last[1]) / (now - last[0]))
            rates = self._rates.setdefault(task_id, deque(maxlen=self.window))
            rates.append(rate)
            said[task_id] = (max(rates), use.mem_mb)
        for gone in self._last.keys() - groups.keys():
            del self._last[gone]
            self._rates.pop(gone, None)
        return said
