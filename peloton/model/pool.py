"""Resource pool configs: Peloton's respool YAML in, validated PoolConfig records out.

Every problem is reported at once, each 'path: message'; nothing a pool file holds (an alias
bomb, .inf, a list where a mapping belongs) raises anything but PoolConfigError.
"""

from __future__ import annotations

import math

from peloton.model.fields import ROOT, describe, is_integer, join, mapping
from peloton.model.fields import text as scalar_text  # `text` is parse_pool_config's argument
from peloton.model.resources import Resources
from peloton.model.safe_yaml import YamlError, YamlLimits, read_yaml

# Peloton's kind names -> our Resources fields.
KIND_FIELDS = {"cpu": "cpu", "memory": "mem_mb", "disk": "disk_mb", "gpu": "gpu"}


class PoolConfigError(ValueError):
    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("invalid resource pool config:\n" + "\n".join(f"  {e}" for e in self.errors))


class _Errors(list):
    """'path: message' lines, as the shared readers report them."""

    def add(self, path: str, message: str) -> None:
        self.append(f"{path}: {message}")


def _number(fields: dict, key: str, path: str, errors: _Errors, default: float = 0.0) -> float:
    """A finite, non-negative number; `default` when absent or wrong (wrong is reported)."""
    if key not in fields:
        return default
    value, where = fields[key], join(path, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        errors.add(where, f"expected a number, got {describe(value)}")
        return default
    try:
        number = float(value)
    except OverflowError:  # a YAML integer beyond any float (0x and a thousand digits)
        number = math.inf
    if not math.isfinite(number):  # .inf and .nan would poison every sum and comparison
        errors.add(where, f"expected a finite number, got {describe(value)}")
        return default
    if number < 0:
        errors.add(where, f"must be >= 0, got {number}")
        return default
    return number


def _resources(fields: dict, errors: _Errors) -> dict[str, dict]:
    """resources: a list of {kind, reservation, limit, share, type}, one per kind at most."""
    items = fields.get("resources", [])
    if not isinstance(items, list):
        errors.add("resources", f"expected a list, got {describe(items)}")
        items = []
    resources: dict[str, dict] = {}
    for i, raw in enumerate(items):
        where = f"resources[{i}]"
        item = mapping(raw, where, errors)
        if item is None:
            continue
        kind = item.get("kind")
        if not isinstance(kind, str) or kind not in KIND_FIELDS:
            errors.add(join(where, "kind"), f"must be one of {', '.join(KIND_FIELDS)}, got {describe(kind)}")
            continue
        if kind in resources:
            errors.add(join(where, "kind"), f"{kind} appears twice")
            continue
        before = len(errors)
        reservation = _number(item, "reservation", where, errors)
        limit = _number(item, "limit", where, errors)
        share = _number(item, "share", where, errors, default=1.0)
        if len(errors) == before and limit < reservation:  # compared only when both are right
            errors.add(where, f"limit {limit} is below reservation {reservation}")
        resources[kind] = {
            "kind": kind, "reservation": reservation, "limit": limit, "share": share,
            "static": is_integer(item.get("type")) and item.get("type") == 2,
        }
    for kind in KIND_FIELDS:  # Peloton fills missing kinds with reservation 0, limit 0, share 1
        resources.setdefault(kind, {"kind": kind, "reservation": 0.0, "limit": 0.0, "share": 1.0, "static": False})
    return resources


def _percent(fields: dict, key: str, default: float, errors: _Errors) -> float:
    """controllerlimit / slacklimit: {maxpercent: 0..100}."""
    if key not in fields:
        return default
    section = mapping(fields[key], key, errors)
    if section is None:
        return default
    value = _number(section, "maxpercent", key, errors, default)
    if value > 100:
        errors.add(join(key, "maxpercent"), f"must be <= 100, got {value}")
    return value


def _name(fields: dict, key: str, errors: _Errors) -> str:
    if key not in fields:
        return ""
    return scalar_text(fields[key], key, errors) or ""


def parse_pool_config(text: str, path: str, limits: YamlLimits = YamlLimits()) -> dict:
    """Parse a Peloton respool YAML (lowercase or camelCase keys) into a PoolConfig record."""
    try:
        doc = read_yaml(text, limits)
    except YamlError as exc:
        raise PoolConfigError([str(exc)]) from None
    errors = _Errors()
    fields = mapping(doc, ROOT, errors, what="a mapping of pool config keys")
    if fields is None:
        raise PoolConfigError(errors)
    if not path.startswith("/") or path == "/" or path.endswith("/") or "//" in path:
        errors.add("path", f"{path!r} must look like /name or /parent/name ('/' is the root pool)")
    resources = _resources(fields, errors)
    controller = _percent(fields, "controllerlimit", 100.0, errors)
    slack = _percent(fields, "slacklimit", 20.0, errors)
    policy = fields.get("policy", 1)
    if not (is_integer(policy) and policy == 1):
        errors.add("policy", f"only 1 (PriorityFIFO) exists, got {describe(policy)}")
    name = _name(fields, "name", errors)
    owning_team = _name(fields, "owningteam", errors)
    if errors:
        raise PoolConfigError(errors)
    parent = path.rsplit("/", 1)[0] or "/"
    return {
        "path": path,
        "name": name or path.rsplit("/", 1)[1],
        "parent": parent,
        "owning_team": owning_team,
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
