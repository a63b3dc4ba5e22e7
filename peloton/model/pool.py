"""Resource pool configs: Peloton's respool YAML in, validated PoolConfig records out.

Every problem is reported at once, each 'path: message'; nothing a pool file holds (an alias
bomb, .inf, a list where a mapping belongs) raises anything but PoolConfigError.
"""

from __future__ import annotations

import math
from typing import Any

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


def _number(fields: dict, key: str, path: str, errors: _Errors, default: float = 0.0,
            positive: bool = False) -> float:
    """A finite, non-negative (or, if `positive`, > 0) number; `default` when absent or wrong
    (wrong is reported)."""
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
    if positive and number <= 0:
        errors.add(where, f"must be > 0, got {number}")
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
        # share 0 would leave a pool out of every share-based split and can make a parent's
        # total share 0, a divisor in the entitlement calculation.
        share = _number(item, "share", where, errors, default=1.0, positive=True)
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


def _names(fields: dict, key: str, errors: _Errors) -> list[str]:
    """A list of names (ldapGroups): each a non-empty string."""
    value = fields.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        errors.add(key, f"expected a list of group names, got {describe(value)}")
        return []
    names = []
    for i, item in enumerate(value):
        name = scalar_text(item, f"{key}[{i}]", errors)
        if name:
            names.append(name)
    return list(dict.fromkeys(names))  # as written, each once


def _parent_of(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _check_parent(fields: dict, path: str, errors: _Errors) -> None:
    """Peloton's YAML may name the parent (a path, or a bare name, or as its API writes a pool's
    ResourcePoolID: a mapping `{value: ...}`); the path decides, so a parent that disagrees with
    it is an error rather than a silent move."""
    if "parent" not in fields:
        return
    raw = fields["parent"]
    if isinstance(raw, dict) and len(raw) == 1 and str(next(iter(raw))).lower() == "value":
        raw = next(iter(raw.values()))  # {value: root}: the id Peloton's API writes
    given = scalar_text(raw, "parent", errors)
    if given is None:
        return
    derived = _parent_of(path)
    if given in ("root", "/"):  # both spell the top level
        ok = derived == "/" or derived.rsplit("/", 1)[1] == given  # (a top-level pool named root)
    elif given.startswith("/"):
        ok = (given.rstrip("/") or "/") == derived
    else:
        ok = derived != "/" and derived.rsplit("/", 1)[1] == given
    if not ok:
        errors.add("parent", f"{given!r} is not the parent of {path!r}, whose parent is {derived!r}")


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
    else:
        _check_parent(fields, path, errors)
    resources = _resources(fields, errors)
    controller = _percent(fields, "controllerlimit", 100.0, errors)
    slack = _percent(fields, "slacklimit", 20.0, errors)
    policy = fields.get("policy", 1)
    if not (is_integer(policy) and policy == 1):
        errors.add("policy", f"only 1 (PriorityFIFO) exists, got {describe(policy)}")
    name = _name(fields, "name", errors)  # a display name; it may differ from the path's last part
    owning_team = _name(fields, "owningteam", errors)
    ldap_groups = _names(fields, "ldapgroups", errors)  # who may use the pool, with owningTeam
    if errors:
        raise PoolConfigError(errors)
    parent = _parent_of(path)
    return {
        "path": path,
        "name": name or path.rsplit("/", 1)[1],
        "parent": parent,
        "owning_team": owning_team,
        "ldap_groups": ldap_groups,
        "resources": [resources[k] for k in KIND_FIELDS],
        "policy": 1,
        "controller_limit_pct": controller,
        "slack_limit_pct": slack,
        "deleted": False,
        "updated_ms": 0,
    }


def pool_resources(config: dict, key: str) -> Resources:
    """One figure of a pool's config per kind ("reservation" or "limit") as Resources."""
    return Resources(**{KIND_FIELDS[r["kind"]]: r[key] for r in config["resources"]})


def pool_limit(config: dict) -> Resources:
    """The most a pool may hold: its limit per kind."""
    return pool_resources(config, "limit")


def controller_limit(config: dict) -> Resources:
    """What a pool's controller tasks may hold together: controllerLimit% of its reservation."""
    return pool_resources(config, "reservation").scaled(config.get("controller_limit_pct", 100.0) / 100.0)


def leaf_pool_error(pools: dict[str, dict], path: str) -> str | None:
    """Why a job cannot go to this pool, or None. Jobs go to existing leaf pools only."""
    if path not in pools:
        known = ", ".join(sorted(pools)) or "none"
        return f"unknown resource pool {path!r} (known pools: {known})"
    if any(p["parent"] == path for p in pools.values()):
        return f"resource pool {path!r} is not a leaf pool; jobs go to leaf pools only"
    return None


# ---- rules that need the rest of the tree --------------------------------------------------

_NOT_COMPARED = ("updated_ms", "deleted")  # bookkeeping, not configuration
_UNSET = {"reservation": 0.0, "limit": 0.0, "share": 1.0, "static": False}  # Peloton's fill-in


def same_pool(a: dict, b: dict) -> bool:
    """The same configuration, bookkeeping aside: a re-create of it is no change."""
    def strip(config: dict) -> dict:
        return {k: v for k, v in config.items() if k not in _NOT_COMPARED}
    return strip(a) == strip(b)


def _kinds(config: dict) -> dict[str, dict]:
    """Resources by kind, a missing kind filled in as the parser would."""
    given = {r["kind"]: r for r in config.get("resources", [])}
    return {k: given.get(k, {"kind": k, **_UNSET}) for k in KIND_FIELDS}


def _amount(value: float) -> str:
    """12 rather than 12.0, and 0.3 rather than 0.30000000000000004."""
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _over(total: float, bound: float) -> bool:
    """total > bound beyond float rounding (0.1 + 0.2 reserved of 0.3 fits)."""
    return total > bound + 1e-9 * max(1.0, abs(bound))


def _children(pools: dict[str, dict], parent: str) -> list[str]:
    return sorted(p for p, c in pools.items() if c["parent"] == parent)


def _reservation_problems(parent: str, parent_config: dict, children: dict[str, dict]) -> list[str]:
    """Per kind, the children's reservations together fit in the parent's."""
    problems = []
    bounds = _kinds(parent_config)
    for kind in KIND_FIELDS:
        parts = {p: _kinds(c)[kind]["reservation"] for p, c in sorted(children.items())}
        total, bound = sum(parts.values()), bounds[kind]["reservation"]
        if _over(total, bound):
            each = ", ".join(f"{p} {_amount(v)}" for p, v in parts.items() if v)
            problems.append(f"{kind} reservation: children of {parent} reserve {_amount(total)} "
                            f"of its {_amount(bound)} ({each})")
    return problems


def _limit_problems(child: str, child_config: dict, parent: str, parent_config: dict) -> list[str]:
    """Per kind, a child may not be allowed more than its parent."""
    problems = []
    mine, theirs = _kinds(child_config), _kinds(parent_config)
    for kind in KIND_FIELDS:
        if _over(mine[kind]["limit"], theirs[kind]["limit"]):
            problems.append(f"{kind} limit: {child} limit {_amount(mine[kind]['limit'])} is above "
                            f"the limit {_amount(theirs[kind]['limit'])} of its parent {parent}")
    return problems


def tree_problems(pools: dict[str, dict], change: dict, *, update: bool = False,
                  leaf_has_jobs: bool = False) -> list[str]:
    """Why pool `change` (a parse_pool_config record) cannot be created, or with update=True
    replace the stored pool of its path, in the tree `pools` (path -> config, live pools only).
    leaf_has_jobs: the new pool's parent has non-terminal jobs (asked only on create).
    A create of a path that exists is refused here; the caller may first treat a re-create of
    the same config (same_pool) as done. Empty when the change is allowed."""
    path = change["path"]
    if path == "/":  # the root's reservation and limit are the cluster's capacity, not config
        return ["path: the root pool / cannot be created or replaced"]
    parent = _parent_of(path)
    if change.get("parent", parent) != parent:  # a pool is addressed by its path
        return [f"parent: {change['parent']} is not the parent of {path}, whose parent is {parent}"]
    stored = pools.get(path)
    if update:
        if stored is None:
            return [f"path: no pool {path} to update"]
        if stored["parent"] != parent:
            return [f"parent: the parent of {path} never changes (stored {stored['parent']}, given {parent})"]
    elif stored is not None:
        return [f"path: {path} already exists"]
    if parent != "/" and parent not in pools:
        return [f"parent: {parent} does not exist (create it first)"]

    problems: list[str] = []
    siblings = {p: pools[p] for p in _children(pools, parent) if p != path}
    if not update and parent != "/" and not siblings and leaf_has_jobs:
        # the jobs would sit in a pool that is no longer a leaf, where no job may be
        problems.append(f"parent: {parent} is a leaf pool with jobs; a pool with jobs cannot get children")
    # Names are unique among siblings by construction: a pool's name is its path's last part, as
    # Peloton's CLI names it. The file's `name` is shown only, so one file may make many pools.
    if parent != "/":  # the root's limit and reservation are the cluster capacity, unknown here
        problems += _limit_problems(path, change, parent, pools[parent])
        problems += _reservation_problems(parent, pools[parent], {**siblings, path: change})
    if update:  # the pool's own children must still fit under its new values
        children = {p: pools[p] for p in _children(pools, path)}
        for child, config in children.items():
            problems += _limit_problems(child, config, path, change)
        if children:
            problems += _reservation_problems(path, change, children)
    return problems


def delete_problems(pools: dict[str, dict], path: str, *, has_jobs: bool) -> list[str]:
    """Why pool `path` cannot be deleted; has_jobs: it holds non-terminal jobs. Only an empty
    leaf goes, so no job and no child is ever left without a pool."""
    if path == "/":
        return ["path: the root pool / cannot be deleted"]
    if path not in pools:
        return [f"path: unknown resource pool {path}"]
    problems = []
    children = _children(pools, path)
    if children:
        problems.append(f"children: {path} has child pools ({', '.join(children)}); delete them first")
    if has_jobs:
        problems.append(f"jobs: {path} has jobs that are not terminal; kill them or let them finish first")
    return problems


def pool_tree(pools: dict[str, dict]) -> dict:
    """The pools as one nested tree from the root, children sorted by path (respool dump).
    A pool whose parent is missing hangs under its nearest existing ancestor, so none is hidden."""
    live = {p: c for p, c in pools.items() if not c.get("deleted") and p != "/"}
    nodes: dict[str, dict[str, Any]] = {"/": {"path": "/", "children": []}}
    for path in sorted(live):
        config = live[path]
        nodes[path] = {
            "path": path,
            "name": config.get("name", path.rsplit("/", 1)[1]),
            "resources": {k: {f: r[f] for f in ("reservation", "limit", "share", "static")}
                          for k, r in _kinds(config).items()},
            "controller_limit_pct": config.get("controller_limit_pct", 100.0),
            "slack_limit_pct": config.get("slack_limit_pct", 20.0),
            "children": [],
        }
    for path in sorted(live):  # sorted, so each list of children comes out sorted too
        above = _parent_of(path)
        while above not in nodes:
            above = _parent_of(above)
        nodes[above]["children"].append(nodes[path])
    return nodes["/"]
