"""Persistent volumes of stateful tasks, as Peloton's (Mesos') persistent volumes: a task config's
`volume` (containerPath, sizeMB) is made on the host where its instance first runs, kept there
across the instance's runs, restarts and updates, and the instance is placed only on that host
afterwards. Pure: the parser reads it, admit pins the instance, launch and the agents make it.

A volume's id is its instance's (`<job id>-<instance>`); its size counts as disk of every run of
the instance (so in the pool's entitlement and on the host's room while a run holds it)."""

from __future__ import annotations

import json
import re
from typing import Any

from peloton.model.constraint import constraint_from_json, constraint_to_record
from peloton.model.daemon import host_of, pinned
from peloton.model.jobspec import VolumeSpec

MAX_SIZE_MB = 1 << 30  # Peloton's sizeMB is a uint32; this many MB is far past any disk
_PART = re.compile(r"^[A-Za-z0-9_.@+-]+$")
VOLUME_STATES = ("CREATED", "DELETED")  # Peloton's VolumeState, as far as a volume here goes


def container_path_problem(path: str) -> str | None:
    """Why a containerPath cannot name a volume's place in a sandbox, or None. As Mesos requires
    of a persistent volume: relative to the sandbox, inside it."""
    if not path:
        return "is empty: give the volume's path in the sandbox, e.g. data"
    if path.startswith("/"):
        return "must be relative to the task's sandbox (as Mesos' persistent volumes are), e.g. data"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or not all(_PART.match(p) for p in parts):
        return "must be a path inside the sandbox: names of letters, digits, '_', '.', '-', '@' or '+', joined by '/'"
    if parts[0] in ("stdout", "stderr", "tmp", ".peloton"):
        return f"must not be {parts[0]!r}: the sandbox's own"
    return None


def volume_id(job_id: str, instance: int) -> str:
    return f"{job_id}-{instance}"


def mount_record(job_id: str, instance: int, volume: VolumeSpec, host_id: str = "") -> dict[str, Any]:
    """The TaskLaunchSpec's `volume`: which volume, where the run sees it, and its host if made."""
    return {"volume_id": volume_id(job_id, instance), "container_path": volume.container_path,
            "size_mb": volume.size_mb, "host_id": host_id}


def mount_of(volume: dict | None) -> tuple[str, str] | None:
    """(volume id, containerPath) of a launch's `volume` record, as a run is given it; None: none."""
    return (volume["volume_id"], volume["container_path"]) if volume else None


def home_of(launch_spec: dict | None) -> str:
    """The host holding the volume of a run's instance ("" when it has none, or it is not made)."""
    volume = (launch_spec or {}).get("volume")
    return volume["host_id"] if volume else ""


def pin_to_home(launch_spec: dict, host_id: str) -> dict:
    """The launch spec of a run whose volume is on `host_id`: that host written in its volume, and
    its constraint pinned to the host, so it is placed there or nowhere (ANDed with its own, as a
    daemon's instance is pinned)."""
    text = launch_spec.get("constraint_json")
    constraint = constraint_from_json(text) if text else None
    if constraint is None or host_of(constraint) != host_id:
        constraint = pinned(constraint, host_id)
    return {**launch_spec, "volume": {**launch_spec["volume"], "host_id": host_id},
            "constraint_json": json.dumps(constraint_to_record(constraint), sort_keys=True)}


def kept_home(old_spec: dict | None, new_spec: dict) -> dict:
    """A run's new launch spec (an update's) keeps its instance's volume where it is: the volume
    stays, so does the pin. A new spec without a volume, or a volume not yet made, is as given."""
    home = home_of(old_spec)
    if not home or not new_spec.get("volume"):
        return new_spec
    return pin_to_home(new_spec, home)


def volume_row(mount: dict, job_id: str, instance: int, at_ms: int) -> dict[str, Any]:
    """A volume's row in the store, as launch records it when it first launches a run with it."""
    return {"volume_id": mount["volume_id"], "job_id": job_id, "instance": instance, "host_id": mount["host_id"],
            "container_path": mount["container_path"], "size_mb": mount["size_mb"], "state": "CREATED",
            "created_ms": at_ms, "updated_ms": at_ms}
