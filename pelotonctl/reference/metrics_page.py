"""metrics.md: every Prometheus metric of peloton/metrics.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from pelotonctl.reference.markdown import banner, cell, code, paragraphs, prose, table


def metric_objects() -> list[tuple[str, Any]]:
    """(variable, metric) of every Prometheus metric peloton/metrics.py defines, in its order."""
    from prometheus_client.metrics import MetricWrapperBase

    from peloton import metrics

    return [(name, value) for name, value in vars(metrics).items() if isinstance(value, MetricWrapperBase)]


def metric_name(metric: Any) -> str:
    """The name a metric is scraped under (a counter's with _total)."""
    return metric._name + ("_total" if metric._type == "counter" else "")


def metrics_md() -> str:
    from peloton import metrics

    source = Path(metrics.__file__).read_text()
    lines = source.splitlines()
    assigned = {t.id: n.lineno for n in ast.parse(source).body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}
    # Sections: `# -- title ---` lines, each with the comment lines under it.
    sections = []
    for i, line in enumerate(lines):
        heading = re.match(r"^# -- (.*?) -*$", line)
        if heading:
            notes = []
            for after in lines[i + 1:]:
                if not after.startswith("#"):
                    break
                notes.append(after[1:].removeprefix(" "))
            sections.append((i + 1, heading.group(1), "\n".join(notes)))
    found = metric_objects()
    out = [banner("peloton/metrics.py", "Metrics"), "# Metrics\n\n",
           f"Every Prometheus metric of the stages, agents and the API ({len(found)}, from `peloton/metrics.py`). "
           "Each stage instance and agent serves them at `/metrics` on `PELOTON_METRICS_PORT` (see "
           "[settings](settings.md)), the API at its own `/metrics`, beside prometheus_client's process metrics "
           "(`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...). `pelotonctl cluster targets` "
           "lists every instance's address for Prometheus.\n\n",
           paragraphs((metrics.__doc__ or "").split("\n\n", 1)[-1]) + "\n\n"]
    section = None
    rows: list[list[str]] = []
    for variable, metric in found:
        line = assigned.get(variable, 0)
        here = next((s for s in reversed(sections) if s[0] < line), None)
        if here is not section:
            if rows:
                out.append(table(["Metric", "Type", "Labels", "Help"], rows) + "\n")
                rows = []
            section = here
            if here:
                out.append(f"## {prose(here[1][0].upper() + here[1][1:])}\n\n")
                if here[2]:
                    out.append(paragraphs(here[2]) + "\n\n")
        kind = metric._type
        if kind == "histogram":
            kind += " (buckets " + ", ".join(f"{b:g}" for b in metric._upper_bounds if b != float("inf")) + ")"
        rows.append([code(metric_name(metric)), kind, ", ".join(code(label) for label in metric._labelnames),
                     cell(metric._documentation)])
    if rows:
        out.append(table(["Metric", "Type", "Labels", "Help"], rows) + "\n")
    return "".join(out).rstrip() + "\n"
