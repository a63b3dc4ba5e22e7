"""Typed readers shared by the job, constraint and pool parsers.

Each reader reports a wrong value as 'path: message' to a problem sink and returns a safe
default, so a parser goes on and reports every problem of a document in one pass.
"""

from __future__ import annotations

from typing import Any, Protocol

ROOT = "<document>"


class ProblemSink(Protocol):
    def add(self, path: str, message: str) -> None: ...


class ProblemList:
    """The simplest sink: 'path: message' lines in the order found, each once."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def add(self, path: str, message: str) -> None:
        line = f"{path}: {message}"
        if line not in self.messages:
            self.messages.append(line)

    def __bool__(self) -> bool:
        return bool(self.messages)


def describe(value: Any) -> str:
    """How a wrong value is shown in 'expected X, got Y'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"  # YAML spelling, not Python's
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    try:
        text = repr(value)
    except ValueError:  # an int longer than Python prints (sys.get_int_max_str_digits)
        return f"an integer of {value.bit_length()} bits"
    return text if len(text) <= 60 else text[:57] + "..."


def join(path: str, key: str | int) -> str:
    key = key if isinstance(key, str) else describe(key)
    return key if path in ("", ROOT) else f"{path}.{key}"


def mapping(value: Any, path: str, problems: ProblemSink, what: str = "a mapping") -> dict | None:
    """A mapping with lowercased string keys and null entries dropped; None if not a mapping."""
    if not isinstance(value, dict):
        problems.add(path, f"expected {what}, got {describe(value)}")
        return None
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            continue  # not a field name we know: ignored like any unknown key
        low = key.lower()
        if low in out:
            problems.add(join(path, low), "given twice (keys are case-insensitive)")
        if item is not None:
            out[low] = item
    return out


def text(value: Any, path: str, problems: ProblemSink) -> str | None:
    """A string; YAML scalars are turned into text as the Go YAML decoder does."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        try:
            return str(value)
        except ValueError:  # an int too long to print: reported below
            pass
    problems.add(path, f"expected a string, got {describe(value)}")
    return None


def is_integer(value: Any) -> bool:
    """An int that is not a bool (YAML's true is no number)."""
    return isinstance(value, int) and not isinstance(value, bool)
