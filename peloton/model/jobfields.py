"""Readers of one key of a job or task config, and the problem list they report to. Each reports
a wrong type as 'path: message' and returns a safe default, so reading goes on and every problem
in the file is reported in one pass."""

from __future__ import annotations

import math
from typing import Any

from peloton.model.fields import describe as _describe
from peloton.model.fields import is_integer
from peloton.model.fields import join as _join
from peloton.model.fields import mapping as _mapping
from peloton.model.fields import text as _text
from peloton.model.jobspec import JobConfigError


class Problems:
    """Collects 'path: message' problems; identical ones are reported once with their instances.

    A defect in defaultconfig shows up in every instance that inherits it; grouping keeps a
    100k-instance job from producing 100k copies of the same line.
    """

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], list[int]] = {}
        # Fields read but not honoured here, each 'path: why': never silent, never a refusal
        # (Peloton's own files carry them and must be accepted).
        self.notices: dict[str, None] = {}

    def note(self, path: str, message: str) -> None:
        self.notices[f"{path}: {message}"] = None

    def add(self, path: str, message: str, instance: int | None = None) -> None:
        instances = self._found.setdefault((path, message), [])
        if instance is not None:
            instances.append(instance)

    def __bool__(self) -> bool:
        return bool(self._found)

    def messages(self) -> list[str]:
        out = []
        for (path, message), instances in self._found.items():
            if not instances:
                out.append(f"{path}: {message}")
            else:
                noun = "instance" if len(instances) == 1 else "instances"
                out.append(f"{path}: {message} ({noun} {_ranges(instances)})")
        return out

    def raise_if_any(self) -> None:
        if self._found:
            raise JobConfigError(self.messages())


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5' (ids ascending)."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# ---------------------------------------------------------------------------------------------
# Typed readers: each reports a wrong type and returns a safe default, so reading goes on and
# every problem in the file gets reported in one pass.


def read_mapping(fields: dict, key: str, path: str, problems: Problems) -> dict:
    """An optional nested mapping; {} when absent or wrong (the latter reported)."""
    if key not in fields:
        return {}
    return _mapping(fields[key], _join(path, key), problems) or {}


def read_string(fields: dict, key: str, path: str, problems: Problems, default: str = "") -> str:
    if key not in fields:
        return default
    text = _text(fields[key], _join(path, key), problems)
    return default if text is None else text


def read_integer(
    fields: dict,
    key: str,
    path: str,
    problems: Problems,
    default: int = 0,
    maximum: int | None = None,
) -> int:
    """A non-negative integer (Peloton's fields are uint32), at most `maximum`."""
    if key not in fields:
        return default
    value, where = fields[key], _join(path, key)
    if not is_integer(value):
        problems.add(where, f"expected an integer, got {_describe(value)}")
        return default
    if value < 0:
        problems.add(where, f"expected a non-negative integer, got {_describe(value)}")
        return default
    if maximum is not None and value > maximum:
        problems.add(where, f"must be at most {maximum}, got {_describe(value)}")
        return default
    return value


def read_amount(fields: dict, key: str, path: str, problems: Problems, cap: float, setting: str = "") -> float | None:
    """A resource amount: a finite number in [0, cap]; 0.0 when absent, None when wrong.

    Checked before any float() so that a huge YAML integer (0x and 100k digits) is refused,
    not an OverflowError; .inf and .nan would make every sum of resources meaningless."""
    if key not in fields:
        return 0.0
    value, where = fields[key], _join(path, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.add(where, f"expected a number, got {_describe(value)}")
        return None
    if isinstance(value, float) and not math.isfinite(value):
        problems.add(where, f"expected a finite number, got {_describe(value)}")
        return None
    if value < 0:
        problems.add(where, f"expected a non-negative number, got {_describe(value)}")
        return None
    if value > cap:
        named = f", {setting}" if setting else ""
        problems.add(where, f"must be at most {plain_number(cap)} (the per-task cap{named}), got {_describe(value)}")
        return None
    return float(value)


def plain_number(number: float) -> str:
    """1024.0 -> '1024', 0.5 -> '0.5': a cap as a person would write it."""
    return str(int(number)) if float(number).is_integer() else str(number)


def read_boolean(fields: dict, key: str, path: str, problems: Problems, default: bool = False) -> bool:
    if key not in fields:
        return default
    value = fields[key]
    if not isinstance(value, bool):
        problems.add(_join(path, key), f"expected true or false, got {_describe(value)}")
        return default
    return value


def read_list(fields: dict, key: str, path: str, problems: Problems) -> list:
    if key not in fields:
        return []
    value = fields[key]
    if not isinstance(value, list):
        problems.add(_join(path, key), f"expected a list, got {_describe(value)}")
        return []
    return value


def read_labels(fields: dict, key: str, path: str, problems: Problems) -> tuple[tuple[str, str], ...]:
    """Peloton labels: a list of {key, value}."""
    where = _join(path, key)
    return tuple(read_named_pairs(read_list(fields, key, path, problems), where, "key", "value", "a label", problems))


def read_named_pairs(items: list, path: str, name_field: str, value_field: str, what: str,
                 problems: Problems) -> list[tuple[str, str]]:
    """A list of {name, value} mappings (labels, environment variables) as pairs, in order."""
    out = []
    for i, item in enumerate(items):
        pair = _mapping(item, f"{path}[{i}]", problems)
        if pair is None:
            continue
        name = read_string(pair, name_field, f"{path}[{i}]", problems)
        if not name:
            problems.add(f"{path}[{i}].{name_field}", f"{what} needs a non-empty {name_field}")
            continue
        out.append((name, read_string(pair, value_field, f"{path}[{i}]", problems)))
    return out


def lower_keys_deep(value: Any) -> Any:
    """Lowercase every mapping key, recursively; values stay as they are.

    Safe on what load_yaml gives: at most 64 levels deep (well within Python's recursion), no
    cycles, and the copy, aliases expanded, at most YamlLimits.max_nodes nodes."""
    if isinstance(value, dict):
        return {
            (k.lower() if isinstance(k, str) else k): lower_keys_deep(v)
            for k, v in value.items()
            if v is not None
        }
    if isinstance(value, list):
        return [lower_keys_deep(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Task configs: each one (defaultconfig and every instanceconfig entry) is read on its own into
# a dict of the top-level keys it sets, so type errors are reported once, at the place written.
