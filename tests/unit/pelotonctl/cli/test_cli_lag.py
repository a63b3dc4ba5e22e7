"""`pelotonctl lag` reads the API's sampler once (it keeps its own window) and prints why a group
is not OK; without an API it samples twice, INTERVAL apart."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pelotonctl.cli.main import app
from tests.unit.pelotonctl.test_lag_sampler import report

runner = CliRunner()


class Cluster:
    """The cluster as `client()` gives it, answering lag with the reports given, in turn."""

    def __init__(self, *answers: dict) -> None:
        self.answers = list(answers)
        self.asked = 0

    def lag(self, stages, window) -> dict:
        self.asked += 1
        return self.answers.pop(0)

    def close(self) -> None:
        pass


def stalled() -> dict:
    answer = report(130, {"launch": "STALL"}, lag=6)
    answer["groups"][0].update(status_since_ms=124_000, detail="6 messages wait unread")
    return answer


def test_through_the_api_one_look_is_the_samplers_view_with_why_and_for_how_long(monkeypatch, tmp_path) -> None:
    cluster = Cluster({**stalled(), "sampler": {"every_s": 1.0, "window": 10, "stall_after_s": 5.0}})
    monkeypatch.setattr("pelotonctl.cli.lag.client", lambda: cluster)
    shown = runner.invoke(app, ["lag", "--group", "launch"], env={"PELOTON_HOME": str(tmp_path)},
                          terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert cluster.asked == 1
    assert "launch STALL for 6 s: 6 messages wait unread" in shown.output


def test_without_an_api_it_looks_twice(monkeypatch, tmp_path) -> None:
    cluster = Cluster(report(100, {"launch": "OK"}), stalled())
    monkeypatch.setattr("pelotonctl.cli.lag.client", lambda: cluster)
    shown = runner.invoke(app, ["lag", "--json", "--interval", "0"], env={"PELOTON_HOME": str(tmp_path)})
    assert shown.exit_code == 0, shown.output
    assert cluster.asked == 2 and json.loads(shown.output)["groups"][0]["status"] == "STALL"
