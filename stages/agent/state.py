"""An agent's state directory, what it must find again after a restart: runs.json (the runs it
started, task id -> its launch and host), offsets.json (per commands partition, the next command
to handle), lease.json (when its lease runs out, in seconds since the epoch) and the endings
journal (stages/agent/endings.py). Each json file is written whole and renamed into place."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def agent_state_dir(home: str | Path, name: str) -> Path:
    """Where an agent keeps what it must find again after a restart (its runs, runc's state), and
    what names its cgroups (agent_cgroup_name)."""
    return Path(home) / "agents" / name


class StateFiles:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, name: str, default: object) -> object:
        """The file's value, or `default` when it is missing or not JSON."""
        try:
            return json.loads((self.path / name).read_text())
        except (OSError, ValueError):
            return default

    def save(self, name: str, value: object) -> None:
        tmp = self.path / (name + ".tmp")
        tmp.write_text(json.dumps(value))
        os.replace(tmp, self.path / name)

    def runs(self) -> dict[str, dict]:
        runs = self.load("runs.json", {})
        return runs if isinstance(runs, dict) else {}

    def save_runs(self, runs: dict[str, dict]) -> None:
        self.save("runs.json", runs)

    def offsets(self) -> dict[str, Any]:
        """The saved offsets, by partition as a string (JSON's keys); each may be anything."""
        saved = self.load("offsets.json", {})
        return saved if isinstance(saved, dict) else {}

    def save_offsets(self, offsets: dict[int, int]) -> None:
        self.save("offsets.json", {str(p): o for p, o in offsets.items()})

    def lease(self) -> object:
        """lease.json as saved (Lease.restored reads it)."""
        return self.load("lease.json", {})

    def save_lease(self, saved: dict) -> None:
        self.save("lease.json", saved)
