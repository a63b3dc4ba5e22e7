"""Tests for peloton.model.safe_yaml: hostile YAML is refused before anything expands."""

from __future__ import annotations

import time
import tracemalloc

import pytest
import yaml

from peloton.model.safe_yaml import YamlLimitError, YamlLimits, load_yaml, yaml_error_text
from tests.conftest import EXAMPLES


def billion_laughs(levels: int = 9) -> str:
    """The classic: each level is nine aliases of the one before, 9**levels strings in all."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def refused_quickly(text: str, limits: YamlLimits = YamlLimits()) -> str:
    """The YamlLimitError message. The refusal must take little CPU (a few milliseconds, a quarter
    second for the worst flow nesting) and little memory; the two are measured apart since tracing
    allocations slows everything down. The bound is CPU time, far above those figures: it tells an
    expansion (seconds to minutes) from a refusal, not a fast machine from a slow one (1.34 s of
    wall time was seen for the flow nesting on a loaded one)."""
    started = time.process_time()
    with pytest.raises(YamlLimitError) as info:
        load_yaml(text, limits)
    elapsed = time.process_time() - started
    assert elapsed < 3.0, f"took {elapsed:.2f}s of CPU"
    tracemalloc.start()
    try:
        with pytest.raises(YamlLimitError):
            load_yaml(text, limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000, f"peak {peak} bytes"
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# Attacks


def test_billion_laughs_is_refused_before_it_expands() -> None:
    message = refused_quickly(billion_laughs())
    assert message.startswith("line ")
    assert "aliases expand to more than 1000000 nodes (a YAML alias bomb?)" in message


def test_a_recursive_alias_is_refused() -> None:
    message = refused_quickly("a: &a\n  b: [1, *a]\n")
    assert message == "line 2: alias *a refers to a node that contains it (a recursive alias)"


def test_five_thousand_nested_flow_sequences_are_refused() -> None:
    message = refused_quickly("[" * 5000 + "]" * 5000)
    assert message == "line 1: nesting deeper than 64 levels"


def test_two_thousand_nested_flow_mappings_are_refused() -> None:
    message = refused_quickly("{a: " * 2000 + "1" + "}" * 2000)
    assert message == "line 1: nesting deeper than 64 levels"


def test_two_thousand_nested_block_mappings_are_refused_at_the_line_that_passes_the_limit() -> None:
    text = "".join(" " * i + "a:\n" for i in range(2000)) + " " * 2000 + "b: 1\n"  # about 2 MB
    message = refused_quickly(text, YamlLimits(max_bytes=len(text)))
    assert message == "line 65: nesting deeper than 64 levels"


def test_too_many_aliases_are_refused_even_when_each_is_small() -> None:
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * 1001) + "]\n"
    assert refused_quickly(text) == "line 2: more than 1000 aliases"


def test_a_large_document_is_refused_before_it_is_parsed() -> None:
    message = refused_quickly("a: " + "x" * 2_000_000)
    assert message == "yaml: the document is 2000003 bytes, more than the limit of 1048576 (PELOTON_MAX_CONFIG_BYTES)"
    # Bytes, not characters: 600k three-byte characters are 1.8 MB.
    assert "1800003 bytes" in refused_quickly("a: " + "€" * 600_000)


def test_nodes_are_counted_without_aliases_too() -> None:
    message = refused_quickly("[" + ", ".join(["1"] * 200) + "]", YamlLimits(max_nodes=100))
    assert message == "line 1: more than 100 nodes"


# ---------------------------------------------------------------------------------------------
# What still loads, and how


def test_aliases_and_merge_keys_within_the_limits_load_as_safe_load_gives_them() -> None:
    text = "base: &base {cpu: 1, mem: 2}\njob:\n  <<: *base\n  cpu: 4\nlist: [*base, *base]\n"
    assert load_yaml(text) == yaml.safe_load(text)
    assert load_yaml(text)["job"] == {"cpu": 4, "mem": 2}


def test_the_limits_are_inclusive() -> None:
    assert load_yaml("[" * 64 + "]" * 64) == yaml.safe_load("[" * 64 + "]" * 64)
    with pytest.raises(YamlLimitError):
        load_yaml("[" * 65 + "]" * 65)
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * 1000) + "]\n"
    assert len(load_yaml(text)["b"]) == 1000


def test_pelotons_example_files_load_exactly_as_safe_load_gives_them() -> None:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        text = path.read_text()
        assert load_yaml(text) == yaml.safe_load(text), path.name


@pytest.mark.parametrize(
    "text, where",
    [
        ("a: 1\nb: 2001-13-01\n", "line 2, column 4"),  # a timestamp with month 13
        ("a: " + "9" * 5000 + "\n", "line 1, column 4"),  # more digits than Python converts
        ("a: [1, 2\n", "line 2, column 1"),
        ("a: *nowhere\n", "line 1, column 4"),
        ("a: \ud800\n", "character 4"),  # a lone surrogate: refused by the reader, not by encode()
        ("name: x\x00\n", "character 8"),
    ],
)
def test_values_that_cannot_be_built_are_yaml_errors_with_their_place(text: str, where: str) -> None:
    with pytest.raises(yaml.YAMLError) as info:
        load_yaml(text)
    assert yaml_error_text(info.value).startswith(f"{where}: invalid YAML: ")


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_documents_are_read_by_libyaml_and_errors_said_by_the_python_reader(monkeypatch) -> None:
    from peloton.model import safe_yaml

    python_reader = safe_yaml._SafeLoader
    monkeypatch.setattr(safe_yaml, "_SafeLoader", None)  # any use of it now fails
    for path in sorted(EXAMPLES.glob("*.yaml")) + sorted(EXAMPLES.glob("stateless/*.yaml")):
        text = path.read_text()
        assert load_yaml(text) == yaml.safe_load(text), path.name
    monkeypatch.setattr(safe_yaml, "_SafeLoader", python_reader)
    # What libyaml says less well, the Python reader says: the character, the alias's name.
    for text, said in (("a:\n\tb: 1\n", "found character '\\t' that cannot start any token"),
                       ("a: *nowhere\n", "found undefined alias 'nowhere'"),
                       ("a: b: c\n", "mapping values are not allowed here")):
        with pytest.raises(yaml.YAMLError) as info:
            load_yaml(text)
        assert said in yaml_error_text(info.value), text
    assert "alias bomb" in refused_quickly(billion_laughs())


def test_the_limits_are_a_value_error() -> None:
    assert issubclass(YamlLimitError, ValueError)
    limits = YamlLimits()
    assert (limits.max_bytes, limits.max_depth, limits.max_aliases, limits.max_nodes) == (
        1_048_576, 64, 1000, 1_000_000)
    with pytest.raises(AttributeError):
        limits.max_depth = 1  # type: ignore[misc]  # frozen
