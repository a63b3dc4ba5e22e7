"""GET /v1/lag and stage_health read the API's one lag sampler (here fed by a scripted monitor, no
broker): every caller the same statuses, with since when; the broker away is a 503 saying so."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from peloton.auth.tokens import issue
from peloton.config import Settings
from peloton.runtime import RecordingEmitter, StaticView
from peloton.store import open_store
from pelotonctl.api.app import make_app
from pelotonctl.api.audit import Audit
from pelotonctl.lag_child import LagUnavailable
from pelotonctl.lag_sampler import LagSampler
from tests.builders.api import HOST
from tests.unit.pelotonctl.test_lag_sampler import Scripted, report


class Manual(LagSampler):
    """Sampled by the test alone, one sample at a time: no thread."""

    def start(self) -> None:
        pass


@pytest.fixture
def api(tmp_path):
    store = open_store(tmp_path / "peloton.db")
    token, row = issue("bob", ["team-b"], False, now_ms=1)
    store.add_token(row)
    settings = Settings(home=tmp_path, store=str(tmp_path / "peloton.db"), bootstrap="kafka-1:9092")
    app = make_app(settings, store, RecordingEmitter("api"), Audit(RecordingEmitter("api"), 1.0),
                   StaticView({"h0": HOST}))
    monitor = Scripted(report(100, {"admit": "OK", "launch": "OK"}),
                       report(101, {"admit": "OK", "launch": "STALL"}, lag=4),
                       LagUnavailable("broker at kafka-1:9092 is unavailable: Connection refused"))
    ops = app.state.operations
    ops.lag_sampler.close()  # never started: no process to end
    ops.lag_sampler = Manual(settings, monitor=monitor, export=True)
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        client.sampler = ops.lag_sampler
        yield client
    store.close()


def test_every_caller_reads_the_samplers_view_with_since_when(api) -> None:
    api.sampler.sample_once()
    api.sampler.sample_once()
    answer = api.get("/v1/lag", params={"stage": ["launch"], "window": 3})  # the window is the sampler's
    assert answer.status_code == 200, answer.text
    [launch] = answer.json()["groups"]
    assert (launch["status"], launch["status_since_ms"], launch["detail"]) == ("STALL", 101_000, "launch is STALL")
    assert answer.json()["sampler"]["window"] == 10
    assert api.app.state.operations.stage_health()["launch"] == ("STALL", 101.0, "launch is STALL")
    metrics = api.get("/metrics").text
    assert 'peloton_group_status{group="u1.peloton.launch",stage="launch",status="STALL"} 1.0' in metrics
    assert 'peloton_group_lag{group="u1.peloton.launch",partition="0",stage="launch",topic="u1.peloton.launch-in"} ' \
           '4.0' in metrics


def test_the_broker_away_is_a_503_that_says_so(api) -> None:
    api.sampler.sample_once()
    api.sampler.sample_once()
    api.sampler.sample_once()  # the broker stopped answering
    away = api.get("/v1/lag")
    assert away.status_code == 503 and away.json()["detail"] == ("broker at kafka-1:9092 is unavailable: "
                                                                 "Connection refused")
    assert {word for word, _since, _why in api.app.state.operations.stage_health().values()} == {"UNKNOWN"}
