"""Tests for peloton.model.constraint: Peloton's constraint forms, their problems, the JSON
record between admit and place, and evaluation."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from peloton.model.constraint import (
    MAX_DEPTH,
    AndConstraint,
    ConstraintError,
    LabelConstraint,
    OrConstraint,
    constraint_from_json,
    constraint_to_record,
    evaluate,
    parse_constraint,
)
from peloton.model.fields import ProblemList


def label(kind: Any = 2, condition: Any = 2, requirement: Any = 1, key: Any = "hostname", value: Any = "h1",
          **extra: Any) -> dict:
    """A LABEL constraint as Peloton's job files write it."""
    return {"type": 1, "labelconstraint": {"kind": kind, "condition": condition, "requirement": requirement,
                                           "label": {"key": key, "value": value}}, **extra}


def parsed(raw: Any) -> Any:
    problems = ProblemList()
    c = parse_constraint(raw, "constraint", problems)
    assert not problems, problems.messages
    return c


def problems_of(raw: Any, path: str = "constraint") -> list[str]:
    problems = ProblemList()
    assert parse_constraint(raw, path, problems) is None
    assert problems.messages
    return problems.messages


def nested(depth: int) -> dict:
    """`depth` levels of constraints: ANDs around one label constraint."""
    c = label()
    for _ in range(depth - 1):
        c = {"type": 2, "andconstraint": {"constraints": [c]}}
    return c


# ---------------------------------------------------------------------------------------------
# Peloton's forms


PIN = LabelConstraint("HOST", "EQUAL", "hostname", "h1", 1)


@pytest.mark.parametrize(
    "raw",
    [
        label(),
        label(kind="HOST", condition="EQUAL"),
        label(kind="LABEL_CONSTRAINT_KIND_HOST", condition="CONDITION_EQUAL"),
        label(kind="host", condition="condition_equal"),
        # v1alpha's spellings, as a gRPC client's JobSpec carries them
        {"type": "CONSTRAINT_TYPE_LABEL", "labelConstraint": {
            "kind": "LABEL_CONSTRAINT_KIND_HOST", "condition": "LABEL_CONSTRAINT_CONDITION_EQUAL", "requirement": 1,
            "label": {"key": "hostname", "value": "h1"}}},
        {"type": "LABEL_CONSTRAINT", "labelConstraint": {"kind": 2, "condition": 2, "requirement": 1,
                                                         "label": {"key": "hostname", "value": "h1"}}},
        {"Type": "LABEL", "LabelConstraint": label()["labelconstraint"]},
        {"labelconstraint": label()["labelconstraint"]},  # type omitted: LABEL
        label(unknown="ignored"),
    ],
)
def test_every_peloton_spelling_of_a_label_constraint_gives_the_same_tree(raw: dict) -> None:
    assert parsed(raw) == PIN


def test_v1alpha_s_pod_kind_counts_tasks() -> None:
    tree = parsed({"type": "CONSTRAINT_TYPE_LABEL", "labelConstraint": {
        "kind": "LABEL_CONSTRAINT_KIND_POD", "condition": "LABEL_CONSTRAINT_CONDITION_LESS_THAN", "requirement": 1,
        "label": {"key": "job", "value": "web"}}})
    assert tree == LabelConstraint("TASK", "LESS_THAN", "job", "web", 1)


def test_and_or_constraints_with_numbers_or_names() -> None:
    task = label(kind=1, condition=1, requirement=3, key="app", value="web")
    tree = parsed({"type": 2, "andConstraint": {"constraints": [
        label(), {"type": "OR_CONSTRAINT", "orconstraint": {"constraints": [task, label(condition=3, requirement=0)]}},
    ]}})
    assert tree == AndConstraint((PIN, OrConstraint((
        LabelConstraint("TASK", "LESS_THAN", "app", "web", 3),
        LabelConstraint("HOST", "GREATER_THAN", "hostname", "h1", 0),
    ))))


def test_label_values_may_be_yaml_scalars_and_requirement_defaults_to_zero() -> None:
    raw = label(value=8080)
    del raw["labelconstraint"]["requirement"]
    assert parsed(raw) == LabelConstraint("HOST", "EQUAL", "hostname", "8080", 0)
    assert parsed(label(value=True)).value == "true"
    assert parsed(label(value=None)).value == ""  # null: absent, an empty value


# ---------------------------------------------------------------------------------------------
# Problems, with their paths


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("x", "constraint: expected a mapping, got 'x'"),
        ({}, "constraint.type: a constraint needs a type"),
        ({"type": 9}, "constraint.type: expected LABEL_CONSTRAINT (1), AND_CONSTRAINT (2) or OR_CONSTRAINT (3), got 9"),
        ({"type": True}, "constraint.type: expected LABEL_CONSTRAINT (1)"),
        ({"type": 1}, "constraint.labelconstraint: a LABEL constraint needs a labelconstraint"),
        (label(requirement="abc"),
         "constraint.labelconstraint.requirement: expected a non-negative integer, got 'abc'"),
        (label(requirement=-1), "constraint.labelconstraint.requirement: expected a non-negative integer, got -1"),
        (label(requirement=True), "constraint.labelconstraint.requirement: expected a non-negative integer, got true"),
        (label(requirement=1.5), "constraint.labelconstraint.requirement: expected a non-negative integer, got 1.5"),
        (label(requirement=10**7), "constraint.labelconstraint.requirement: must be at most 1000000, got 10000000"),
        (label(requirement=16**5000),
         "constraint.labelconstraint.requirement: must be at most 1000000, got an integer of"),
        (label(kind=3), "constraint.labelconstraint.kind: expected TASK (1) or HOST (2), got 3"),
        (label(condition="ABOUT"),
         "constraint.labelconstraint.condition: expected LESS_THAN (1), EQUAL (2) or GREATER_THAN (3), got 'ABOUT'"),
        (label(key=""), "constraint.labelconstraint.label.key: a label constraint needs a non-empty label key"),
        (label(key=[1]), "constraint.labelconstraint.label.key: expected a string, got a list"),
        (label(value={"a": 1}), "constraint.labelconstraint.label.value: expected a string, got a mapping"),
        ({"type": 1, "labelconstraint": {"label": {"key": "k"}}},
         "constraint.labelconstraint.kind: a label constraint needs a kind"),
        ({"type": 1, "labelconstraint": [1]}, "constraint.labelconstraint: expected a mapping, got a list"),
        ({"type": 2}, "constraint.andconstraint: an AND constraint needs andconstraint.constraints"),
        ({"type": 3, "orconstraint": "x"}, "constraint.orconstraint: expected a mapping, got 'x'"),
        ({"type": 2, "andconstraint": {"constraints": label()}},
         "constraint.andconstraint.constraints: expected a non-empty list of constraints, got a mapping"),
        ({"type": 2, "andconstraint": {"constraints": []}},
         "constraint.andconstraint.constraints: expected a non-empty list of constraints, got a list"),
        ({"type": 2, "andconstraint": {}},
         "constraint.andconstraint.constraints: expected a non-empty list of constraints, got nothing"),
        ({"type": 2, "andconstraint": {"constraints": [label(), "x"]}},
         "constraint.andconstraint.constraints[1]: expected a mapping, got 'x'"),
        ({"type": 2, "andconstraint": {"constraints": [label(requirement="abc")]}},
         "constraint.andconstraint.constraints[0].labelconstraint.requirement: expected a non-negative integer, "
         "got 'abc'"),
    ],
)
def test_each_problem_is_reported_with_its_path(raw: Any, expected: str) -> None:
    messages = problems_of(raw)
    assert any(m.startswith(expected) for m in messages), messages


def test_constraints_nested_deeper_than_sixteen_levels_are_refused() -> None:
    assert parsed(nested(MAX_DEPTH)) is not None
    messages = problems_of(nested(MAX_DEPTH + 1))
    deepest = "constraint" + ".andconstraint.constraints[0]" * MAX_DEPTH
    assert messages == [f"{deepest}: constraints nested deeper than 16 levels"]


def test_every_problem_of_a_tree_is_reported_at_once() -> None:
    raw = {"type": 3, "orconstraint": {"constraints": [label(requirement="abc"), label(kind=7), "x"]}}
    assert problems_of(raw, "defaultconfig.constraint") == [
        "defaultconfig.constraint.orconstraint.constraints[0].labelconstraint.requirement: "
        "expected a non-negative integer, got 'abc'",
        "defaultconfig.constraint.orconstraint.constraints[1].labelconstraint.kind: expected TASK (1) or HOST (2), "
        "got 7",
        "defaultconfig.constraint.orconstraint.constraints[2]: expected a mapping, got 'x'",
    ]


def test_keys_given_twice_in_different_case_are_a_problem() -> None:
    raw = label()
    raw["labelConstraint"] = raw["labelconstraint"]
    assert problems_of(raw) == ["constraint.labelconstraint: given twice (keys are case-insensitive)"]


# ---------------------------------------------------------------------------------------------
# The record between admit and place


def test_the_record_is_canonical_and_reads_back_to_the_same_tree() -> None:
    tree = AndConstraint((PIN, OrConstraint((LabelConstraint("TASK", "LESS_THAN", "app", "web", 2), PIN))))
    record = constraint_to_record(tree)
    assert record == {"type": "AND", "andconstraint": {"constraints": [
        {"type": "LABEL", "labelconstraint": {"kind": "HOST", "condition": "EQUAL", "requirement": 1,
                                              "label": {"key": "hostname", "value": "h1"}}},
        {"type": "OR", "orconstraint": {"constraints": [
            {"type": "LABEL", "labelconstraint": {"kind": "TASK", "condition": "LESS_THAN", "requirement": 2,
                                                  "label": {"key": "app", "value": "web"}}},
            constraint_to_record(PIN),
        ]}},
    ]}}
    assert constraint_from_json(json.dumps(record, sort_keys=True)) == tree


def _random_bytes(seed: int) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))


HOSTILE_JSON: list[Any] = [
    "",
    "{",
    "not json",
    "[" * 100_000,
    "[" * 100_000 + "]" * 100_000,
    '{"a": ' * 100_000,
    '{"type": "AND", "andconstraint": {"constraints": [' * 50 + "{}" + "]}}" * 50,
    "1" * 5000,  # more digits than Python converts
    "NaN",
    "null",
    "17",
    '"LABEL"',
    "[]",
    "{}",
    '{"type": "LABEL"}',
    '{"type": "LABEL", "labelconstraint": {"kind": "HOST", "condition": "EQUAL", "requirement": "1", '
    '"label": {"key": "k"}}}',
    '{"type": "LABEL", "labelconstraint": {"kind": "HOST", "condition": "EQUAL", "requirement": Infinity, '
    '"label": {"key": "k"}}}',
    '{"type": "AND", "andconstraint": {"constraints": [null]}}',
    '{"type": "OR", "orconstraint": {"constraints": 5}}',
    b"\xff\xfe\x00",
    None,
    17,
    *(_random_bytes(seed) for seed in range(20)),
    *(_random_bytes(seed).decode("latin-1") for seed in range(20, 40)),
]


@pytest.mark.parametrize("text", HOSTILE_JSON, ids=range(len(HOSTILE_JSON)))
def test_hostile_constraint_json_raises_constraint_error_and_nothing_else(text: Any) -> None:
    with pytest.raises(ConstraintError) as info:
        constraint_from_json(text)
    assert info.value.errors and all(": " in e for e in info.value.errors)
    assert isinstance(info.value, ValueError)


def test_deep_json_is_refused_with_a_clear_message() -> None:
    with pytest.raises(ConstraintError) as info:
        constraint_from_json("[" * 100_000)
    assert info.value.errors == ["constraint: JSON nested too deeply"]


# ---------------------------------------------------------------------------------------------
# Evaluation (placement's use is tested in test_placement.py)


def test_evaluation_of_every_condition() -> None:
    host = {"zone": "z1"}
    for condition, requirement, expected in [("EQUAL", 1, True), ("EQUAL", 0, False), ("LESS_THAN", 1, False),
                                             ("LESS_THAN", 2, True), ("GREATER_THAN", 0, True),
                                             ("GREATER_THAN", 1, False)]:
        c = LabelConstraint("HOST", condition, "zone", "z1", requirement)
        assert evaluate(c, host, []) is expected, (condition, requirement)


def test_evaluation_never_raises_on_any_parsed_tree() -> None:
    tree = parsed(nested(MAX_DEPTH))
    assert evaluate(tree, {}, []) is False
    assert evaluate(tree, {"hostname": "h1"}, [{"hostname": "h1"}]) is True
    assert evaluate("not a constraint", {}, []) is False  # type: ignore[arg-type]
