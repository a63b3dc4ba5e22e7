"""The Grafana dashboard operators import (docker/grafana): every series it draws is one the
project's processes export, so a renamed or mistyped metric shows up here, not as an empty panel."""

from __future__ import annotations

import json
import re

from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from peloton import metrics
from peloton.config import REPO_ROOT

DASHBOARD = REPO_ROOT / "docker" / "grafana" / "peloton-dashboard.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> set[str]:
    """The sample names of every metric peloton.metrics defines, and the process collector's."""
    names = set()
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    names.update(sample.name for family in REGISTRY.collect() if family.name.startswith("process_")
                 for sample in family.samples)
    return names


def test_every_series_the_grafana_dashboard_draws_is_exported() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    drawn = {name for panel in panels for target in panel.get("targets", ())
             for name in re.findall(r"\b((?:peloton|kafka|process)_[a-z_]+)\b", target["expr"])}
    assert len(drawn) > 20
    missing = drawn - exported()
    assert not missing, f"the dashboard draws series nothing exports: {sorted(missing)}"


def test_the_grafana_dashboard_shows_agents_behind_or_cut_off() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = " ".join(t["expr"] for p in panels for t in p.get("targets", ()))
    for name in ("peloton_launch_unread_launches", "peloton_agent_held_launches_total",
                 "peloton_agent_reader_renewals_total", "peloton_agent_producer_renewals_total"):
        assert name in exprs, name
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
