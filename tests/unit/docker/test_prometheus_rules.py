"""docker/prometheus: the config and alert rules are valid for Prometheus (Debian's promtool),
and each alert fires on the series that mean its failure and on no healthy cluster's
(docker/prometheus/alerts.test.yml)."""

from __future__ import annotations

import shutil
import subprocess

from peloton.config import REPO_ROOT

RULES = REPO_ROOT / "docker" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess:
    assert shutil.which("promtool"), "Debian's prometheus (promtool) is not installed: `make system` installs it"
    return subprocess.run(["promtool", *args], cwd=RULES, capture_output=True, text=True, timeout=60)


def test_the_rules_and_the_config_are_valid() -> None:
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0 and "SUCCESS: 13 rules found" in checked.stdout, checked.stdout + checked.stderr
    config = promtool("check", "config", "--syntax-only", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr


def test_each_alert_fires_on_its_failure_and_not_on_a_healthy_cluster() -> None:
    tested = promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every alert is exercised by a test that expects it to fire.
    rules = (RULES / "alerts.yml").read_text()
    tests = (RULES / "alerts.test.yml").read_text()
    alerts = [line.split(":", 1)[1].strip() for line in rules.splitlines() if line.strip().startswith("- alert:")]
    assert len(alerts) == 13
    for alert in alerts:
        assert f"alertname: {alert}\n        exp_alerts:\n          - exp_labels" in tests, alert
