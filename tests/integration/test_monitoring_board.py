"""The monitoring that ships in docker/prometheus and docker/grafana, checked against a real
Prometheus (Debian's) scraping a dev stack under load: every query of the Grafana board answers
with series, and every metric it names is one the processes export. Grafana itself is not
installable here; its board is only queries, so Prometheus answering them is the check."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer

from peloton.config import REPO_ROOT, Settings
from peloton.runtime.clients import kafka_access
from peloton.topics import Catalogue
from pelotonctl.dev.processes import free_port
from tests.integration.helpers import ctl_in, stack_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOCKER = REPO_ROOT / "docker"
BOARD = DOCKER / "grafana" / "peloton-dashboard.json"
# PromQL's own words and functions, and the board's label names: what is left of a query's
# identifiers once these go is the metric names it reads.
PROMQL_WORDS = {"sum", "max", "min", "by", "rate", "increase", "histogram_quantile", "or", "on", "vector", "and",
                "le", "state", "stage", "pool", "kind", "reason", "strategy", "agent", "consumergroup", "job",
                "instance", "outcome", "time", "cpu"}


def board_queries() -> list[tuple[str, str]]:
    doc = json.loads(BOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in doc["panels"] for target in panel.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"[a-z_][a-z0-9_]*", re.sub(r'"[^"]*"', "", re.sub(r"\[[^\]]*\]", "", expr))))
    return {n for n in names if n not in PROMQL_WORDS}


def exported(url: str) -> set[str]:
    """The metric families a process's /metrics names (HELP lines: a labelled family with no
    child yet is named too)."""
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    names = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            names.add(name)
            names.update(name + suffix for suffix in ("_total", "_bucket", "_count", "_sum"))
    return names


def test_every_query_of_the_grafana_board_answers_from_a_stack_under_load(tmp_path: Path) -> None:
    assert shutil.which("prometheus"), "Debian's prometheus is not installed: `make system` installs it"
    ctl = ctl_in(stack_env(tmp_path), 120)
    up = ctl("dev", "up")
    assert up.returncode == 0, up.stderr
    prometheus = None
    try:
        targets = tmp_path / "peloton-targets.json"
        assert ctl("cluster", "targets", "--output", str(targets)).returncode == 0
        config = tmp_path / "prometheus"
        config.mkdir()
        shutil.copy(DOCKER / "prometheus" / "alerts.yml", config / "alerts.yml")
        text = (DOCKER / "prometheus" / "prometheus.yml").read_text()
        text = text.replace("/etc/prometheus/peloton-targets.json", str(targets))
        text = text.replace("scrape_interval: 10s", "scrape_interval: 1s").replace("evaluation_interval: 10s",
                                                                                     "evaluation_interval: 1s")
        (config / "prometheus.yml").write_text(text)
        port = free_port()
        with open(tmp_path / "prometheus.log", "wb") as log:  # the server keeps its own descriptor
            prometheus = subprocess.Popen(
                ["prometheus", f"--config.file={config / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                stdout=subprocess.DEVNULL, stderr=log)

        def query(expr: str) -> list:
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
            with urllib.request.urlopen(url, timeout=10) as answer:
                doc = json.loads(answer.read())
            assert doc["status"] == "success", (expr, doc)
            return doc["data"]["result"]

        # Load, as the tutorials make it: a borrower preempted by a claimant, many short tasks, a
        # service, and a record that is not Avro (a dead letter).
        assert ctl("respool", "create", "/team", str(REPO_ROOT / "examples/pools/team.yaml")).returncode == 0
        for pool, job in (("/team", "borrower"), ("/DefaultResPool", "fanout"), ("/DefaultResPool", "service")):
            made = ctl("job", "create", pool, str(REPO_ROOT / f"examples/jobs/{job}.yaml"))
            assert made.returncode == 0, made.stderr
        time.sleep(5)
        made = ctl("job", "create", "/DefaultResPool", str(REPO_ROOT / "examples/jobs/claimant.yaml"))
        assert made.returncode == 0, made.stderr
        access = json.loads(ctl("dev", "env", "--kafka-user", "producer", "--json").stdout)
        junk = Producer(kafka_access(Settings(
            bootstrap=access["PELOTON_KAFKA_BOOTSTRAP"], kafka_user="producer",
            kafka_password=access["PELOTON_KAFKA_PASSWORD"], kafka_ca=access["PELOTON_KAFKA_CA"])))
        junk.produce(Catalogue()["job-commands"].name, key=b"junk", value=b"this is not avro")
        assert junk.flush(30) == 0

        # Every process is scraped, and has been for long enough to give rates over [1m].
        deadline = time.monotonic() + 120
        while True:
            up_series = query('up{job="peloton"}')
            if up_series and all(s["value"][1] == "1" for s in up_series) and query(
                    "count(count_over_time(up[1m]) >= 20)"):
                break
            assert time.monotonic() < deadline, f"not every target up: {up_series}"
            time.sleep(2)
        listed = json.loads(targets.read_text())
        families = set().union(*(exported(f"http://{t['targets'][0]}/metrics") for t in listed))
        silent, unknown = [], []
        for title, expr in board_queries():
            unknown += [(title, name) for name in metric_names(expr) if name not in families]
            if not query(expr):
                silent.append((title, expr))
        assert unknown == [], f"the board reads metrics no process exports: {unknown}"
        assert silent == [], f"board queries that answer nothing: {silent}"
        # The alert rules loaded, and a healthy stack fires none of the paging ones.
        rules = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=10).read())
        names = {r["name"] for g in rules["data"]["groups"] for r in g["rules"]}
        assert "PelotonStageWithoutMembers" in names and len(names) == 13
        firing = query('ALERTS{alertstate="firing",severity="page"}')
        assert firing == [], firing
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(timeout=30)
        ctl("dev", "down")
