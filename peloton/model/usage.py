"""What a run used, as its agent's cgroup counted it: said at the end of the run's last message
("...; cpu 2.50 s, peak memory 48.0 MB"), which travels with its status to the job manager's
history, and read back from there for `task get`, `task events` and the API."""

from __future__ import annotations

import re

_SAID = re.compile(r"cpu ([0-9]+(?:\.[0-9]+)?) s(?:, peak memory ([0-9]+(?:\.[0-9]+)?) MB)?$")


def describe_usage(cpu_seconds: float, peak_mem_mb: float | None) -> str:
    peak = f", peak memory {peak_mem_mb:.1f} MB" if peak_mem_mb is not None else ""
    return f"cpu {cpu_seconds:.2f} s{peak}"


def usage_in(message: str | None) -> dict:
    """{'cpu_seconds': ..., 'peak_mem_mb': ...} said by a run's message, each None where it says none."""
    found = _SAID.search(message or "")
    if found is None:
        return {"cpu_seconds": None, "peak_mem_mb": None}
    return {"cpu_seconds": float(found.group(1)),
            "peak_mem_mb": float(found.group(2)) if found.group(2) is not None else None}
