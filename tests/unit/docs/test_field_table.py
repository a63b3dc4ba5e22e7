"""docs/peloton/fields.md says, for every field of Peloton's v0 job config, v1alpha stateless job
spec and v0 update config, what this scheduler does with it. These tests hold the page to the
protos (every field has a row, every row names a field) and to the parser (a field the page calls
refused is refused with its path, a noted one is named in a notice, a dropped one changes nothing
and says nothing, and a sample of honoured ones reach the job's spec without a notice)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from peloton.api.v0.job import job_pb2
from peloton.api.v0.update import update_pb2
from peloton.api.v1alpha.job.stateless import stateless_pb2
from peloton.model.jobspec import JobLimits
from tests.unit.docs.field_cases import (  # noqa: F401 (the cases and what builds them)
    BASES,
    CASES,
    HONOURED,
    NOTED,
    REFUSED,
    SILENT,
    UPDATES,
    Case,
    _doc,
    _parse,
    _paths,
    _set,
    _task,
    base_path,
)

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "peloton" / "fields.md"

STATES = ("honoured", "noted", "refused", "bookkeeping")  # none dropped: read by nothing, named nowhere
TABLE_HEADER = "| field | state | what happens here |"
# A "## " heading names the message its tables start from: (section, root message, path prefix).
SECTIONS = {"`JobConfig`": ("v0", job_pb2.JobConfig.DESCRIPTOR, ""),
            "`JobSpec`": ("v1", stateless_pb2.JobSpec.DESCRIPTOR, ""),
            "`UpdateConfig`": ("update", update_pb2.UpdateConfig.DESCRIPTOR, "updateConfig")}
# Deep enough for every Peloton message; Mesos' own messages nest further, and are read only as far
# as the page describes them.
MAX_DEPTH = 12


# ---------------------------------------------------------------------------------------------
# The page


@dataclass(frozen=True)
class Row:
    section: str
    paths: tuple[str, ...]
    states: tuple[tuple[str, str], ...]  # (state, condition or ""), in the page's order
    alias: str  # `same as X`: X, else ""
    line: int

    def has(self, state: str) -> bool:
        return any(s == state for s, _condition in self.states)


_PART = re.compile(rf"^(?:({'|'.join(STATES)})|same as `([^`]+)`)(?: \(([^()]+)\))?$")


def _rows(text: str) -> list[Row]:
    rows: list[Row] = []
    section, in_table = "", False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            found = [name for key, (name, _d, _p) in SECTIONS.items() if key in line]
            assert len(found) == 1, f"line {number}: a '## ' heading names one of {list(SECTIONS)}: {line}"
            section = found[0]
        if line == TABLE_HEADER:
            assert section, f"line {number}: a field table before the first '## ' section"
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
        if not in_table or line.startswith("| ---"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 3, f"line {number}: a row has three cells: {line}"
        paths = tuple(re.findall(r"`([^`]+)`", cells[0]))
        assert paths and cells[0] == ", ".join(f"`{p}`" for p in paths), f"line {number}: field cell {cells[0]!r}"
        states, alias = [], ""
        for part in cells[1].split("; "):
            match = _PART.match(part)
            assert match, f"line {number}: {part!r} is no state ({', '.join(STATES)}, or same as `X`)"
            if match.group(2):
                alias = match.group(2)
            else:
                states.append((match.group(1), match.group(3) or ""))
        rows.append(Row(section, paths, tuple(states), alias, number))
    return rows


ROWS = _rows(PAGE.read_text())


def _rows_of(section: str) -> dict[str, Row]:
    """Each path of a section's rows -> its row."""
    return {path: row for row in ROWS if row.section == section for path in row.paths}


def _covering(section: str, path: str) -> tuple[str, Row] | None:
    """The row that describes `path`: its own, else the nearest `X.*` row above it."""
    rows = _rows_of(section)
    if path in rows:
        return path, rows[path]
    covering = [p for p in rows if p.endswith(".*") and (path == base_path(p) or path.startswith(base_path(p) + "."))]
    if not covering:
        return None
    best = max(covering, key=len)
    return best, rows[best]


def _described_below(section: str, path: str) -> bool:
    return any(base_path(p).startswith(path + ".") for p in _rows_of(section))


# ---------------------------------------------------------------------------------------------
# The protos


def _message_of(fd: Any) -> Any:
    """The message a field holds (a map's value message), or None for a scalar or an enum."""
    message = fd.message_type
    if message is not None and message.GetOptions().map_entry:
        message = message.fields_by_name["value"].message_type
    return message


def _leaves(section: str, message: Any, prefix: str, seen: frozenset[str], depth: int) -> Iterator[str]:
    """The paths of every field a table must describe: scalars and enums, and the messages a walk
    stops at (a message already above, one too deep, a Mesos message the page describes only as a
    whole). A map's entries are walked as their value message, under the map's own path."""
    for fd in message.fields:
        path = f"{prefix}.{fd.json_name}" if prefix else fd.json_name
        inner = _message_of(fd)
        stop = (inner is None or not inner.fields or inner.full_name in seen or depth >= MAX_DEPTH
                or inner.full_name.startswith("google.protobuf.")
                or (inner.full_name.startswith("mesos.") and not _described_below(section, path)))
        if stop:
            yield path
        else:
            yield from _leaves(section, inner, path, seen | {inner.full_name}, depth + 1)


def _all_leaves(section: str) -> list[str]:
    _name, root, prefix = next(v for v in SECTIONS.values() if v[0] == section)
    return list(_leaves(section, root, prefix, frozenset({root.full_name}), 0))


def _resolves(section: str, path: str) -> bool:
    """Whether a dotted path names a field of the section's root message (through Mesos' messages
    and maps' values too)."""
    _name, message, prefix = next(v for v in SECTIONS.values() if v[0] == section)
    parts = path.split(".")
    if prefix:
        if parts[0] != prefix:
            return False
        parts = parts[1:]
    for i, part in enumerate(parts):
        fd = next((f for f in message.fields if f.json_name == part), None) if message is not None else None
        if fd is None:
            return False
        message = _message_of(fd)
        if message is None and i < len(parts) - 1:
            return False
    return True


def _alias_section(section: str, target: str) -> str:
    return section if any(base_path(p) == target or p.startswith(target + ".") for p in _rows_of(section)) else "v0"


# ---------------------------------------------------------------------------------------------
# The page against the protos


def test_the_page_has_a_title_and_a_table_for_each_message() -> None:
    text = PAGE.read_text()
    assert text.startswith("# ") and not text.startswith("## ")
    assert {row.section for row in ROWS} == {"v0", "v1", "update"}
    assert len(ROWS) > 100


@pytest.mark.parametrize("section", ["v0", "v1", "update"])
def test_every_field_of_the_protos_has_a_row(section: str) -> None:
    leaves = _all_leaves(section)
    assert len(leaves) > (5 if section == "update" else 60)
    missing = [path for path in leaves if _covering(section, path) is None]
    assert not missing, f"fields of Peloton's protos without a row in {PAGE.name} ({section}): {missing}"


def test_every_row_names_a_field_of_the_protos_once() -> None:
    wrong = [(row.line, p) for row in ROWS for p in row.paths if not _resolves(row.section, base_path(p))]
    assert not wrong, f"rows naming no field of the protos: {wrong}"
    seen: dict[tuple[str, str], int] = {}
    for row in ROWS:
        for path in row.paths:
            assert (row.section, path) not in seen, f"{path} has two rows (lines {seen[row.section, path]}, {row.line})"
            seen[row.section, path] = row.line


def test_every_row_that_says_same_as_points_at_rows_for_each_of_its_fields() -> None:
    wrong = []
    for section in ("v0", "v1", "update"):
        for leaf in _all_leaves(section):
            covering = _covering(section, leaf)
            if covering is None or not covering[1].alias:
                continue
            path, row = covering
            target_section = _alias_section(section, row.alias)
            twin = row.alias + leaf[len(base_path(path)):]
            described = _covering(target_section, twin) is not None or _described_below(target_section, twin)
            if not (_resolves(target_section, twin) and described):
                wrong.append((leaf, twin))
    assert not wrong, f"fields a 'same as' row sends to no row: {wrong}"


# ---------------------------------------------------------------------------------------------
# The page against the parser: minimal jobs, each with one field set


# Rows whose state shows only beyond the parser: `job create` refuses a file naming another pool
# than the one it is given (tests/unit/pelotonctl/test_job_create_pool.py).
NOT_FROM_A_FILE = {("v0", "respoolID.value", "refused"), ("v1", "respoolId.value", "refused")}


def test_every_refused_noted_and_dropped_row_has_a_case_and_every_case_its_row() -> None:
    by_path = {(c.section, c.row, c.state) for c in CASES}
    missing = []
    for row in ROWS:
        for state in ("refused", "noted", "dropped"):
            if row.has(state) and not any((row.section, p, state) in by_path | NOT_FROM_A_FILE for p in row.paths):
                missing.append((row.line, row.paths[0], state))
    assert not missing, f"rows of {PAGE.name} without a case here: {missing}"
    for case in CASES:
        its = _rows_of(case.section).get(case.row)
        assert its is not None, f"{case.id}: no such row"
        assert its.has(case.state) or (case.state == "honoured" and its.alias), f"{case.id}: the row says {its.states}"


@pytest.mark.parametrize("base", sorted(BASES))
def test_each_base_job_is_valid_and_draws_no_notice(base: str) -> None:
    spec, notices = _parse(BASES[base], JobLimits())
    assert spec is not None and notices == [], (base, notices)


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.id)
def test_a_refused_field_is_refused_with_its_path(case: Case) -> None:
    assert _parse(_doc(case, with_field=False), case.limits)[0] is not None, "the job without it is valid"
    spec, named = _parse(_doc(case), case.limits)
    assert spec is None, f"{case.id}: accepted"
    assert case.named in named, f"{case.id}: the refusal names {named}"


@pytest.mark.parametrize("case", NOTED, ids=lambda c: c.id)
def test_a_noted_field_is_accepted_with_a_notice_naming_its_path(case: Case) -> None:
    spec, named = _parse(_doc(case), case.limits)
    assert spec is not None, f"{case.id}: refused: {named}"
    assert case.named in named, f"{case.id}: the notices name {named}"


@pytest.mark.parametrize("case", SILENT, ids=lambda c: c.id)
def test_a_dropped_or_bookkeeping_field_changes_nothing_and_says_nothing(case: Case) -> None:
    without, _ = _parse(_doc(case, with_field=False), case.limits)
    spec, named = _parse(_doc(case), case.limits)
    assert spec is not None and without is not None, f"{case.id}: refused: {named}"
    assert named == [], f"{case.id}: named in notices {named}: the page should say noted"
    assert spec == without, f"{case.id}: the field changed the job's spec: the page should say what it does"


@pytest.mark.parametrize("case", HONOURED, ids=lambda c: c.id)
def test_an_honoured_field_reaches_the_spec_without_a_notice(case: Case) -> None:
    spec, named = _parse(_doc(case), case.limits)
    assert spec is not None, f"{case.id}: refused: {named}"
    assert named == [], f"{case.id}: named in notices {named}"
    assert case.check is not None and case.check(spec), f"{case.id}: not in the spec"


def _instance_twin(case: Case) -> Case:
    """The case with its field set in instance 1's entry (instanceConfig, instanceSpec)."""
    renames: tuple[tuple[str, str], ...] = (("defaultconfig.", "instanceconfig.1."),)
    if case.section == "v0":
        old, new = "defaultConfig.", "instanceConfig.1."
        context = dict(case.context)
    else:  # an instanceSpec pod is a whole pod: it has its own container, the base's (an entrypoint, or a command)
        old, new = "defaultSpec.", "instanceSpec.1."
        renames = (*renames, ("defaultspec.", "instancespec.1."))
        context = {**case.context, "instanceSpec.1.containers": BASES[case.base]["defaultSpec"]["containers"]}
    named = case.named
    for before, after in renames:
        named = named.replace(before, after)
    return Case(case.section, case.row, case.state, case.base, {k.replace(old, new): v for k, v in case.sets.items()},
                names=named, context=context, limits=case.limits)


@pytest.mark.parametrize("case", [c for c in NOTED if c.row.startswith(("defaultConfig.", "defaultSpec."))],
                         ids=lambda c: c.id)
def test_an_instance_s_own_config_fares_as_the_default_one(case: Case) -> None:
    twin = _instance_twin(case)
    spec, named = _parse(_doc(twin), twin.limits)
    assert spec is not None and twin.named in named, f"{twin.id}: {named}"


@pytest.mark.parametrize("case", [c for c in UPDATES if c.base == "update_file"], ids=lambda c: c.id)
def test_an_update_config_in_a_job_file_is_read_as_the_page_says(case: Case) -> None:
    from stages.admit.commands import update_config_problems, update_fields

    def text(with_field: bool) -> str:
        return yaml.safe_dump(_doc(case, with_field), sort_keys=False)

    def options(with_field: bool) -> Any:
        return update_fields(text(with_field))[1]

    if case.state == "refused":
        assert update_config_problems(text(False)) == [], case.id
        assert _paths(update_config_problems(text(True))) == [case.named], case.id
    else:
        assert case.check is not None and case.check(options(True)) and options(True) != options(False), case.id


@pytest.mark.parametrize("case", [c for c in UPDATES if c.base == "update_api"], ids=lambda c: c.id)
def test_an_update_config_the_v0_api_refuses_is_refused_with_its_name(case: Case) -> None:
    import grpc

    from peloton.api.v0.update.svc import update_svc_pb2
    from pelotonctl.api.rpc import v0_updates
    from pelotonctl.api.rpc.calls import Failed

    request = update_svc_pb2.CreateUpdateRequest()
    for name, value in case.sets.items():
        setattr(request.updateConfig, name, value)
    with pytest.raises(Failed) as refused:
        v0_updates.create(None, request)  # type: ignore[arg-type]  # refused before the call is used
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.detail.startswith(base_path(case.row).split(".")[-1]), refused.value.detail
