"""Resource pool configs: Peloton's respool YAML in, validated PoolConfig records out."""

from __future__ import annotations

from typing import Any

import yaml

from peloton.model.resources import Resources

# Peloton's kind names -> our Resources fields.
KIND_FIELDS = {"cpu": "cpu", "memory": "mem_mb", "disk": "disk_mb", "gpu": "gpu"}


class PoolConfigError(ValueError):
    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("invalid resource pool config:\n" + "\n".join(f"  {e}" for e in errors))


def _lower_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k).lower(): _lower_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_lower_keys(v) for v in obj]
    return obj


def _number(value: Any, path: str, errors: list[str], default: float = 0.0) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        errors.append(f"{path}: expected a number, got {value!r}")
        return default
    if value < 0:
        errors.append(f"{path}: must be >= 0, got {value}")
    return float(value)


def parse_pool_config(text: str, path: str) -> dict:
    """Parse a Peloton respool YAML (lowercase or camelCase keys) into a PoolConfig record."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PoolConfigError([f"not valid YAML: {exc}"]) from None
    if not isinstance(doc, dict):
        raise PoolConfigError([f"the file must be a mapping, got {type(doc).__name__}"])
    doc = _lower_keys(doc)
    errors: list[str] = []
    if not path.startswith("/") or path == "/" or path.endswith("/") or "//" in path:
        errors.append(f"path: {path!r} must look like /name or /parent/name ('/' is the root pool)")
    resources: dict[str, dict] = {}
    for i, item in enumerate(doc.get("resources") or []):
        where = f"resources[{i}]"
        if not isinstance(item, dict):
            errors.append(f"{where}: expected a mapping")
            continue
        kind = item.get("kind")
        if kind not in KIND_FIELDS:
            errors.append(f"{where}.kind: must be one of {', '.join(KIND_FIELDS)}, got {kind!r}")
            continue
        if kind in resources:
            errors.append(f"{where}.kind: {kind} appears twice")
            continue
        reservation = _number(item.get("reservation"), f"{where}.reservation", errors)
        limit = _number(item.get("limit"), f"{where}.limit", errors)
        share = _number(item.get("share"), f"{where}.share", errors, default=1.0)
        if limit < reservation:
            errors.append(f"{where}: limit {limit} is below reservation {reservation}")
        resources[kind] = {
            "kind": kind, "reservation": reservation, "limit": limit, "share": share,
            "static": item.get("type") == 2,
        }
    for kind in KIND_FIELDS:  # Peloton fills missing kinds with reservation 0, limit 0, share 1
        resources.setdefault(kind, {"kind": kind, "reservation": 0.0, "limit": 0.0, "share": 1.0, "static": False})
    controller = _number((doc.get("controllerlimit") or {}).get("maxpercent"), "controllerlimit.maxpercent", errors, 100.0)
    if controller > 100:
        errors.append(f"controllerlimit.maxpercent: must be <= 100, got {controller}")
    slack = _number((doc.get("slacklimit") or {}).get("maxpercent"), "slacklimit.maxpercent", errors, 20.0)
    policy = doc.get("policy", 1)
    if policy not in (None, 1):
        errors.append(f"policy: only 1 (PriorityFIFO) exists, got {policy!r}")
    if errors:
        raise PoolConfigError(errors)
    parent = path.rsplit("/", 1)[0] or "/"
    return {
        "path": path,
        "name": str(doc.get("name") or path.rsplit("/", 1)[1]),
        "parent": parent,
        "owning_team": str(doc.get("owningteam") or ""),
        "resources": [resources[k] for k in KIND_FIELDS],
        "policy": 1,
        "controller_limit_pct": controller,
        "slack_limit_pct": slack,
        "deleted": False,
        "updated_ms": 0,
    }


def pool_limit(config: dict) -> Resources:
    """The most a pool may hold: its limit per kind."""
    values = {KIND_FIELDS[r["kind"]]: r["limit"] for r in config["resources"]}
    return Resources(**values)


def leaf_pool_error(pools: dict[str, dict], path: str) -> str | None:
    """Why a job cannot go to this pool, or None. Jobs go to existing leaf pools only."""
    if path not in pools:
        known = ", ".join(sorted(pools)) or "none"
        return f"unknown resource pool {path!r} (known pools: {known})"
    if any(p["parent"] == path for p in pools.values()):
        return f"resource pool {path!r} is not a leaf pool; jobs go to leaf pools only"
    return None
