"""Peloton placement constraints as a typed tree: parsed once, evaluated many times.

A job file's `constraint` is read when the job is parsed, so `job validate`, `job create` and
the stages agree on it; the admit stage writes it to the task's launch spec as canonical JSON
(constraint_to_record), and the place stage reads that back with the same validator
(constraint_from_json), since any producer can write launch specs to a topic. Evaluation then
works on a tree known to be well formed and never raises.

Peloton's forms are accepted as its job files write them: enums as numbers or names, keys in
lowercase or camelCase. Pure Python: no Kafka.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from peloton.model.fields import ProblemList, ProblemSink, describe, is_integer, join, mapping
from peloton.model.fields import text as scalar_text  # `text` is constraint_from_json's argument

KINDS = ("TASK", "HOST")
CONDITIONS = ("LESS_THAN", "EQUAL", "GREATER_THAN")
MAX_REQUIREMENT = 1_000_000  # far above any count of tasks on one host
MAX_DEPTH = 16  # AND/OR nesting; Peloton's own constraints are one or two levels deep

# Peloton's enums arrive as numbers or as names (index + 1 = the enum value in its API).
_TYPES = {1: "LABEL", 2: "AND", 3: "OR"}
_KINDS = {1: "TASK", 2: "HOST"}
_CONDITIONS = {1: "LESS_THAN", 2: "EQUAL", 3: "GREATER_THAN"}
# Name spellings (compared in upper case) -> our names: v0's, and v1alpha's (its pod is our task).
_TYPE_NAMES = {**{t: t for t in _TYPES.values()}, **{f"{t}_CONSTRAINT": t for t in _TYPES.values()},
               **{f"CONSTRAINT_TYPE_{t}": t for t in _TYPES.values()}}
_KIND_NAMES = {**{k: k for k in KINDS}, **{f"LABEL_CONSTRAINT_KIND_{k}": k for k in KINDS},
               "LABEL_CONSTRAINT_KIND_POD": "TASK"}
_CONDITION_NAMES = {**{c: c for c in CONDITIONS}, **{f"CONDITION_{c}": c for c in CONDITIONS},
                    **{f"LABEL_CONSTRAINT_CONDITION_{c}": c for c in CONDITIONS}}


class ConstraintError(ValueError):
    """Carries every problem found, each 'path: message'."""

    def __init__(self, errors: Iterable[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(["invalid constraint:", *(f"  {e}" for e in self.errors)]))


@dataclass(frozen=True, slots=True)
class LabelConstraint:
    kind: str  # 'TASK': count tasks on the host with the label; 'HOST': the host's own label
    condition: str  # 'LESS_THAN' | 'EQUAL' | 'GREATER_THAN', comparing that count with requirement
    key: str
    value: str
    requirement: int


@dataclass(frozen=True, slots=True)
class AndConstraint:
    children: tuple[Constraint, ...]


@dataclass(frozen=True, slots=True)
class OrConstraint:
    children: tuple[Constraint, ...]


Constraint = LabelConstraint | AndConstraint | OrConstraint


# ---------------------------------------------------------------------------------------------
# Parsing


def parse_constraint(raw: Any, path: str, problems: ProblemSink) -> Constraint | None:
    """A constraint as Peloton writes it; None when anything in it is wrong (each problem is
    reported with its path). The whole tree is read, so one pass reports every problem."""
    counted = _Counted(problems)
    constraint = _parse(raw, path, counted, 1)
    return None if counted.count else constraint


class _Counted:
    """Passes problems on and counts them: any problem anywhere in the tree voids it."""

    def __init__(self, problems: ProblemSink) -> None:
        self.problems = problems
        self.count = 0

    def add(self, path: str, message: str) -> None:
        self.count += 1
        self.problems.add(path, message)


def _parse(raw: Any, path: str, problems: ProblemSink, depth: int) -> Constraint | None:
    if depth > MAX_DEPTH:
        problems.add(path, f"constraints nested deeper than {MAX_DEPTH} levels")
        return None
    fields = mapping(raw, path, problems)
    if fields is None:
        return None
    kind = _constraint_type(fields, path, problems)
    if kind == "LABEL":
        return _label_constraint(fields, path, problems)
    if kind in ("AND", "OR"):
        children = _children(fields, kind, path, problems, depth)
        if children is None:
            return None
        return AndConstraint(children) if kind == "AND" else OrConstraint(children)
    return None


def _constraint_type(fields: dict, path: str, problems: ProblemSink) -> str | None:
    if "type" not in fields:
        if "labelconstraint" in fields:  # as in Peloton's files that omit the type
            return "LABEL"
        problems.add(join(path, "type"),
                     "a constraint needs a type (LABEL_CONSTRAINT, AND_CONSTRAINT or OR_CONSTRAINT)")
        return None
    return _enum(fields["type"], _TYPES, _TYPE_NAMES, join(path, "type"), problems,
                 "LABEL_CONSTRAINT (1), AND_CONSTRAINT (2) or OR_CONSTRAINT (3)")


def _enum(value: Any, numbers: dict[int, str], names: dict[str, str], path: str, problems: ProblemSink,
          expected: str) -> str | None:
    """One of Peloton's enums, given as its number or one of its names (any case)."""
    if is_integer(value) and value in numbers:
        return numbers[value]
    if isinstance(value, str) and value.upper() in names:
        return names[value.upper()]
    problems.add(path, f"expected {expected}, got {describe(value)}")
    return None


def _children(fields: dict, kind: str, path: str, problems: ProblemSink,
              depth: int) -> tuple[Constraint, ...] | None:
    """andconstraint / orconstraint: {constraints: [constraint, ...]}, at least one."""
    key = f"{kind.lower()}constraint"
    where = join(path, key)
    if key not in fields:
        problems.add(where, f"an {kind} constraint needs {key}.constraints, a list of constraints")
        return None
    body = mapping(fields[key], where, problems)
    if body is None:
        return None
    items = body.get("constraints")
    if not isinstance(items, list) or not items:
        got = "nothing" if items is None else describe(items)
        problems.add(join(where, "constraints"), f"expected a non-empty list of constraints, got {got}")
        return None
    children = [
        _parse(item, f"{where}.constraints[{i}]", problems, depth + 1) for i, item in enumerate(items)
    ]
    parsed = [c for c in children if c is not None]
    if len(parsed) < len(children):
        return None
    return tuple(parsed)


def _label_constraint(fields: dict, path: str, problems: ProblemSink) -> LabelConstraint | None:
    where = join(path, "labelconstraint")
    if "labelconstraint" not in fields:
        problems.add(where, "a LABEL constraint needs a labelconstraint")
        return None
    body = mapping(fields["labelconstraint"], where, problems)
    if body is None:
        return None
    kind = _required_enum(body, "kind", _KINDS, _KIND_NAMES, where, problems, "TASK (1) or HOST (2)")
    condition = _required_enum(body, "condition", _CONDITIONS, _CONDITION_NAMES, where, problems,
                               "LESS_THAN (1), EQUAL (2) or GREATER_THAN (3)")
    label = _label(body, where, problems)
    requirement = _requirement(body, where, problems)
    if kind is None or condition is None or label is None or requirement is None:
        return None
    return LabelConstraint(kind, condition, label[0], label[1], requirement)


def _required_enum(body: dict, key: str, numbers: dict[int, str], names: dict[str, str], path: str,
                   problems: ProblemSink, expected: str) -> str | None:
    if key not in body:
        # Peloton's 0 (unknown) is no kind or condition at all: refuse rather than guess.
        problems.add(join(path, key), f"a label constraint needs a {key}: {expected}")
        return None
    return _enum(body[key], numbers, names, join(path, key), problems, expected)


def _label(body: dict, path: str, problems: ProblemSink) -> tuple[str, str] | None:
    """label: {key, value}; the key must not be empty, the value may be."""
    where = join(path, "label")
    if "label" not in body:
        problems.add(where, "a label constraint needs a label {key, value}")
        return None
    label = mapping(body["label"], where, problems)
    if label is None:
        return None
    key = scalar_text(label["key"], join(where, "key"), problems) if "key" in label else ""
    value = scalar_text(label["value"], join(where, "value"), problems) if "value" in label else ""
    if key == "":
        problems.add(join(where, "key"), "a label constraint needs a non-empty label key")
        return None
    if key is None or value is None:
        return None
    return key, value


def _requirement(body: dict, path: str, problems: ProblemSink) -> int | None:
    """How many labels the condition compares with; 0 when absent, as in Peloton."""
    if "requirement" not in body:
        return 0
    value, where = body["requirement"], join(path, "requirement")
    if not is_integer(value) or value < 0:
        problems.add(where, f"expected a non-negative integer, got {describe(value)}")
        return None
    if value > MAX_REQUIREMENT:
        problems.add(where, f"must be at most {MAX_REQUIREMENT}, got {describe(value)}")
        return None
    return value


# ---------------------------------------------------------------------------------------------
# The canonical record and its JSON


def constraint_to_record(c: Constraint) -> dict:
    """A JSON-able dict in Peloton's shape with our names; constraint_from_json reads it back."""
    if isinstance(c, LabelConstraint):
        return {
            "type": "LABEL",
            "labelconstraint": {
                "kind": c.kind,
                "condition": c.condition,
                "label": {"key": c.key, "value": c.value},
                "requirement": c.requirement,
            },
        }
    key = "andconstraint" if isinstance(c, AndConstraint) else "orconstraint"
    return {"type": "AND" if key == "andconstraint" else "OR",
            key: {"constraints": [constraint_to_record(child) for child in c.children]}}


def constraint_from_json(text: str) -> Constraint:
    """Parse and validate a constraint's JSON; any defect raises ConstraintError, nothing else."""
    try:
        raw = json.loads(text)
    except RecursionError:  # json.loads recurses once per nesting level
        raise ConstraintError(["constraint: JSON nested too deeply"]) from None
    except (ValueError, TypeError) as exc:  # not JSON, not text, a number too long to read
        raise ConstraintError([f"constraint: not valid JSON ({str(exc)[:120]})"]) from None
    problems = ProblemList()
    constraint = parse_constraint(raw, "constraint", problems)
    if problems or constraint is None:
        raise ConstraintError(problems.messages or ["constraint: not a constraint"])
    return constraint


# ---------------------------------------------------------------------------------------------
# Evaluation


def evaluate(c: Constraint | None, host_labels: Mapping[str, str],
             task_label_counts: Mapping[tuple[str, str], int]) -> bool:
    """Whether a host satisfies the constraint (None: no constraint, any host does).

    HOST label constraints count the host's own label (0 or 1). TASK label constraints count the
    tasks on the host that carry the label: `task_label_counts` maps (key, value) to that count,
    over every task on the host (those the host manager reports, placements still in flight and
    the gang's own tasks placed before this one), so a lookup costs the same however busy the
    host is. The count is compared with the requirement by the condition. Trees come from
    parse_constraint, so they are at most MAX_DEPTH deep and the recursion is bounded."""
    if c is None:
        return True
    if isinstance(c, LabelConstraint):
        if c.kind == "TASK":
            count = task_label_counts.get((c.key, c.value), 0)
        else:
            count = 1 if host_labels.get(c.key) == c.value else 0
        if c.condition == "LESS_THAN":
            return count < c.requirement
        if c.condition == "GREATER_THAN":
            return count > c.requirement
        return count == c.requirement
    if isinstance(c, AndConstraint):
        return all(evaluate(child, host_labels, task_label_counts) for child in c.children)
    if isinstance(c, OrConstraint):
        return any(evaluate(child, host_labels, task_label_counts) for child in c.children)
    return False  # not a constraint: no host satisfies it
