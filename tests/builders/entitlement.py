"""Pool trees and resources for the entitlement calculation's tests."""

from __future__ import annotations

import yaml

from peloton.model.pool import parse_pool_config
from peloton.model.resources import Resources

KINDS = ("cpu", "gpu", "memory", "disk")
FIELD = {"cpu": "cpu", "gpu": "gpu", "memory": "mem_mb", "disk": "disk_mb"}


def pool(path: str, slack_pct: float | None = None, static: bool = False, **kinds) -> tuple[str, dict]:
    """A pool record as parse_pool_config makes it; each kind given as (reservation, limit, share)."""
    config: dict = {"resources": [
        {"kind": kind, "reservation": r, "limit": limit, "share": share, **({"type": 2} if static else {})}
        for kind, (r, limit, share) in kinds.items()
    ]}
    if slack_pct is not None:
        config["slackLimit"] = {"maxPercent": slack_pct}
    return path, parse_pool_config(yaml.safe_dump(config), path)


def res(cpu=0.0, memory=0.0, disk=0.0, gpu=0.0) -> Resources:
    return Resources(cpu=cpu, mem_mb=memory, disk_mb=disk, gpu=gpu)
