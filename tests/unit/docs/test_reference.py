"""The reference pages of the docs site (pelotonctl/reference/, run by MkDocs before every build)
list everything the code has: every command of the Click tree, every Settings field, every OpenAPI
operation, every topic of topics.yaml and every metric of peloton/metrics.py. The expectations are
read from the code here, not from the generator."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from pelotonctl import reference
from pelotonctl.reference import api_page, topics_page

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {name: make() for name, make in reference.PAGES.items()}


def _plain(text: str) -> str:
    """Markdown as words: escapes, emphasis and whitespace out, for finding a comment in a page."""
    text = text.replace("&lt;", "<").replace("\\", "").replace("*", "").replace("`", "")
    return " ".join(text.split())


def _section(page: str, heading: str) -> str:
    """A page's text from a heading line starting with `heading` to the next heading."""
    start = next(i for i, line in enumerate(page.splitlines()) if line.startswith(heading))
    lines = page.splitlines()[start + 1:]
    end = next((i for i, line in enumerate(lines) if line.startswith("#")), len(lines))
    return "\n".join(lines[:end])


def test_every_command_of_the_click_tree_is_in_the_cli_reference(pages) -> None:
    from typer.main import get_command

    from pelotonctl.cli.main import app

    commands: list[tuple[str, object]] = []

    def walk(command, path):
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            commands.append((" ".join(path), command))
        for name, sub in (subcommands or {}).items():
            walk(sub, [*path, name])

    walk(get_command(app), [])
    page = pages["cli.md"]
    documented = [m.group(1) for m in re.finditer(r"^#{2,4} pelotonctl ([a-z -]+?) \{ #", page, re.M)]
    assert len(documented) == len(commands) > 60
    assert documented == [path for path, _ in commands]
    for path, command in commands:
        section = _section(page, f"{'#' * min(path.count(' ') + 2, 4)} pelotonctl {path} ")
        for param in command.params:
            if "--help" not in param.opts:
                name = param.opts[0] if param.param_type_name == "option" else (param.metavar or param.name.upper())
                assert f"`{name}`" in section, (path, name)
        assert _plain(command.help.split("\n")[0]) in _plain(section), path


def test_every_setting_is_in_the_settings_reference_with_its_variable_type_and_comment(pages) -> None:
    from peloton import config

    page = pages["settings.md"]
    rows = re.findall(r"^\| `(PELOTON_\w+)` \| `(\w+)` \| `([\w.\[\] |]+)` \|", page, re.M)
    fields = dataclasses.fields(config.Settings)
    assert [(variable, name) for variable, name, _type in rows] == [(config._env_name(f.name), f.name) for f in fields]
    assert {"PELOTON_KAFKA_BOOTSTRAP", "PELOTON_STORE", "PELOTON_AGENT_LEASE_S"} <= {v for v, _n, _t in rows}
    assert dict((name, kind) for _v, name, kind in rows)["home"] == "Path"
    # Every comment above a field in config.py is on the page, above its fields.
    lines = Path(config.__file__).read_text().splitlines()
    start = lines.index("class Settings:")
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("@classmethod"))
    comment: list[str] = []
    plain_page = _plain(page)
    for line in lines[start + 1:end]:
        if line.strip().startswith("#"):
            comment.append(line.strip()[1:])
        elif comment:
            assert _plain(" ".join(comment)) in plain_page, comment
            comment = []


def test_every_openapi_operation_is_in_the_api_reference_with_its_permission(pages) -> None:
    page = pages["api.md"]
    document = api_page.openapi_document()
    operations = [(method.upper(), path) for path, ops in document["paths"].items() for method in ops]
    documented = re.findall(r"^### (GET|POST|PUT|DELETE|PATCH) `([^`]+)`$", page, re.M)
    assert sorted(documented) == sorted(operations) and len(operations) > 30
    for heading, permission in ((("DELETE", "/v1/respools/{path}"), "`pool.delete` (administrators)"),
                                (("POST", "/v1/jobs/{job_id}/stop"), "`job.stop` (the pool's owners"),
                                (("GET", "/v1/jobs/{job_id}/tasks"), "`job.read`"),
                                (("POST", "/v1/updates/{update_id}/{action}"), "`update.{action}` (the pool's owners"),
                                (("GET", "/v1/hosts"), "`host.read` (any known user)"),
                                (("GET", "/healthz"), "Permission: none")):
        assert permission in _section(page, f"### {heading[0]} `{heading[1]}`"), heading
    # Every operation that takes a token says which permission it checks (or how it filters).
    for method, path in operations:
        section = _section(page, f"### {method} `{path}`")
        assert "Permission:" in section and "Permission: a valid token" not in section, (method, path)


def test_every_topic_and_its_schemas_and_comments_are_in_the_topics_reference(pages) -> None:
    page = pages["topics.md"]
    text = (REPO / "topics.yaml").read_text()
    topics = yaml.safe_load(text)["topics"]
    ids = yaml.safe_load((REPO / "schemas" / "avro" / "ids.yaml").read_text())
    headings = re.findall(r"^## (peloton\.[\w-]+) \{ #", page, re.M)
    assert headings == [t["name"] for t in topics.values()] and len(headings) == 11
    for topic in topics.values():
        section = _section(page, f"## {topic['name']} ")
        assert f"| Partitions | {topic['partitions']}" in section
        assert f"`{topic['cleanup_policy']}`" in section
        for schema in topic["value_schemas"]:
            assert f"[{schema}](#schema-" in section and f"(id {ids[schema]})" in section, (topic["name"], schema)
        row = {line.split(" | ")[0]: line for line in section.splitlines()}
        assert all(w in row["| Written by"] for w in topic["written_by"]), topic["name"]
        assert all(r in row["| Read by"] for r in topic["read_by"]), topic["name"]
    for name in ids:
        if "@" not in name:
            assert re.search(rf"^### {re.escape(name)} \{{ #schema-", page, re.M), name
    # Every comment of the topics, whole-line or at a line's end, is on the page.
    plain_page = _plain(page)
    for line in text[text.index("\ntopics:"):].splitlines():
        _content, comment = topics_page._split_comment(line)
        if comment:
            assert _plain(comment) in plain_page, comment


def test_every_metric_is_in_the_metrics_reference(pages) -> None:
    from prometheus_client.metrics import MetricWrapperBase

    from peloton import metrics

    page = pages["metrics.md"]
    defined = [m for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)]
    rows = re.findall(r"^\| `(\w+)` \| (\w+)", page, re.M)
    assert len(rows) == len(defined) > 30
    for metric in defined:
        name = metric._name + ("_total" if metric._type == "counter" else "")
        assert (name, metric._type) in rows, name
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
        assert all(f"`{label}`" in row for label in metric._labelnames), name


def test_the_reference_index_links_every_generated_page_and_git_ignores_them() -> None:
    index = (REPO / "docs" / "reference" / "index.md").read_text()
    ignored = (REPO / ".gitignore").read_text().splitlines()
    for name in reference.PAGES:
        assert f"]({name})" in index, name
        assert f"docs/reference/{name}" in ignored, name
    assert "site/" in ignored


def test_pages_are_written_only_when_they_change(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(reference, "PAGES", {"one.md": lambda: "# One\n"})
    assert reference.write_pages(tmp_path) == [tmp_path / "one.md"]
    assert reference.write_pages(tmp_path) == []  # `mkdocs serve` would rebuild for ever otherwise
    assert (tmp_path / "one.md").read_text() == "# One\n"


def test_every_grpc_method_is_in_the_grpc_reference_served_or_with_its_reason(pages) -> None:
    from pelotonctl.api.rpc import catalog, server

    page = pages["grpc.md"]
    for service in server.services():
        section = page.split(f"## `{service.full_name}`\n", 1)[1].split("\n## ", 1)[0]
        for method in service.methods:
            name = server.method_name(method)
            [row] = [line for line in section.splitlines() if line.startswith(f"| `{method.name}`")]
            if name in catalog.SERVED:
                assert "| served |" in row, row
            else:
                assert "| not served |" in row and _plain(catalog.not_served_reason(name) or "")[:40] in _plain(row)
