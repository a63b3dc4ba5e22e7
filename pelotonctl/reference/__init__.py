"""The reference pages of the docs site, generated from the code at every build so that they
cannot go stale: docs/reference/{cli,settings,api,grpc,topics,metrics}.md (ignored by git), one module
each. docs/generate.py, a MkDocs hook, writes them before each build; tests/unit/docs checks that
they list everything the code has."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pelotonctl.reference.api_page import api_md
from pelotonctl.reference.cli_page import cli_md
from pelotonctl.reference.grpc_page import grpc_md
from pelotonctl.reference.markdown import OUT
from pelotonctl.reference.metrics_page import metrics_md
from pelotonctl.reference.settings_page import settings_md
from pelotonctl.reference.topics_page import topics_md

PAGES: dict[str, Callable[[], str]] = {"cli.md": cli_md, "settings.md": settings_md, "api.md": api_md,
                                       "grpc.md": grpc_md, "topics.md": topics_md, "metrics.md": metrics_md}


def write_pages(out: Path = OUT) -> list[Path]:
    """Write every generated page; returns those whose text changed."""
    out.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, make in PAGES.items():
        path, text = out / name, make()
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed
