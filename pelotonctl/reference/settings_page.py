"""settings.md: every field of peloton.config.Settings, its PELOTON_* variable (config's own
mapping), type and default, with the comment written above it in config.py (read with ast)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

from pelotonctl.reference.markdown import banner, code, paragraphs, table


def settings_fields() -> list[dict[str, Any]]:
    """Every Settings field in order: name, variable, type, default, the source of its default,
    and the comment block above it ("" for a field right under another)."""
    import dataclasses

    from peloton import config

    source = Path(config.__file__).read_text()
    tree = ast.parse(source)
    lines = source.splitlines()
    settings_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    declared = {f.name: f for f in dataclasses.fields(config.Settings)}
    found = []
    for node in settings_class.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        comment: list[str] = []
        at = node.lineno - 2
        while at >= 0 and lines[at].strip().startswith("#"):
            comment.insert(0, lines[at].strip()[1:].removeprefix(" "))
            at -= 1
        name = node.target.id
        f = declared[name]
        value_source = ast.get_source_segment(source, node.value) if node.value else ""
        found.append({"name": name, "variable": config._env_name(name), "type": ast.unparse(node.annotation),
                      "default": f.default, "factory": f.default is dataclasses.MISSING,
                      "source": value_source or "", "literal": isinstance(node.value, ast.Constant),
                      "comment": "\n".join(comment)})
    return found


def _dev_stack_keys() -> set[str]:
    """The settings a running dev stack fills in (config._dev_stack's `keys`)."""
    from peloton import config

    function = ast.parse(inspect.getsource(config._dev_stack)).body[0]
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "keys" for t in node.targets):
            return {str(v) for v in ast.literal_eval(node.value)}
    return set()


def _setting_default(f: dict[str, Any]) -> str:
    if f["factory"]:  # field(default_factory=...): computed when the settings are made
        made = re.sub(r"^field\(default_factory=(lambda: )?", "", f["source"]).removesuffix(")")
        return f"computed: {code(made + ('' if '(' in made else '()'))}"
    value = f["default"]
    shown = code(str(value).lower() if isinstance(value, bool) else value)
    return shown if f["literal"] else f"{shown} ({code(f['source'])})"  # 30 * 86400.0 beside 2592000.0


def settings_md() -> str:
    from peloton.config import DEV_PACE

    fields = settings_fields()
    dev_stack = _dev_stack_keys()
    out = [banner("peloton/config.py", "Settings"), "# Settings\n\n",
           f"Every process (stage, agent, API, `pelotonctl`) reads its settings from `PELOTON_*` variables: "
           f"{len(fields)} in all, the fields of `Settings` in `peloton/config.py`. A variable that is unset or "
           "empty keeps the default (but `PELOTON_TOPIC_PREFIX`, where empty is a value); a running dev stack "
           "(`pelotonctl dev up`) fills in what it runs (marked *dev stack* below) unless a variable says "
           "otherwise. Numbers are written as Python reads them (`2.5`, `1000000`); true or false as `1`, `true`, "
           "`yes`, `on` or `0`, `false`, `no`, `off`. A value that does not parse, or settings that do not fit "
           "together (`Settings.problems()`), stop the process naming the variables.\n\n"
           "Each comment is the one written above the fields in `config.py`: it speaks for the fields under it, "
           "up to the next comment. `home_dir()` is `PELOTON_HOME`, else `.peloton` in the checkout.\n\n"]
    group: list[dict[str, Any]] = []

    def flush() -> None:
        if not group:
            return
        if group[0]["comment"]:
            out.append(paragraphs(group[0]["comment"]) + "\n\n")
        rows = []
        for f in group:
            default = _setting_default(f)
            if f["name"] in DEV_PACE:
                default += f"; dev stack and tests: {code(DEV_PACE[f['name']])}"
            if f["name"] in dev_stack:
                default += "; *dev stack*: its own"
            rows.append([code(f["variable"]), code(f["name"]), code(f["type"]), default])
        out.append(table(["Variable", "Field", "Type", "Default"], rows) + "\n")
        group.clear()

    for f in fields:
        if f["comment"]:
            flush()
        group.append(f)
    flush()
    return "".join(out).rstrip() + "\n"
