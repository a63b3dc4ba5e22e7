"""The API with its store away, and with a stage or a host not doing its part, without a broker:
reads served from the views still answer (and say so), reads that need the store answer 503 in one
line within the guard's deadline, and job status and task list say which stage their job waits on
and which of its hosts are silent."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from peloton.auth.tokens import issue
from pelotonctl.health import StageHealth
from tests.builders.api import HOST, JOB
from tests.builders.store_away import api_over_switch

DEADLINE_S = 0.5
SILENT = {**HOST, "host_id": "h1", "state": "DOWN", "reachable": False, "updated_ms": 1_000, "job_tasks": {"j1": 2}}


@pytest.fixture
def api(tmp_path):
    app, switch, alice = api_over_switch(tmp_path, SILENT)
    app.state.door.guard.deadline_s = DEADLINE_S
    with TestClient(app) as client:
        client.switch, client.alice = switch, {"Authorization": f"Bearer {alice}"}
        client.path = str(tmp_path / "peloton.db")
        yield client
    switch.released.set()
    switch.store.close()


def timed(api, method: str, path: str, **kwargs):
    started = time.monotonic()
    answer = api.request(method, path, headers=api.alice, **kwargs)
    return answer, time.monotonic() - started


@pytest.mark.parametrize("away", ["hung", "stopped"])
def test_with_the_store_away_view_reads_answer_marked_and_store_reads_answer_503_naming_it(api, away) -> None:
    assert api.get("/v1/jobs/j1/status", headers=api.alice).status_code == 200  # the token, known
    assert api.get("/v1/respools", headers=api.alice).status_code == 200  # the pools, known
    setattr(api.switch, away, True)
    status, took = timed(api, "GET", "/v1/jobs/j1/status")
    assert status.status_code == 503 and took < DEADLINE_S + 1.0, (status.text, took)
    why = "did not answer within 0.5 s" if away == "hung" else "is unavailable (unable to open database file)"
    assert status.json()["detail"] == f"the store (SQLite at {api.path}) {why}: job status needs it"
    served = {}
    for path in ("/v1/hosts", "/v1/respools"):  # from the views (and what the API last read of the pools)
        answer, took = timed(api, "GET", path)
        assert answer.status_code == 200 and took < 0.5, (path, answer.text, took)
        assert answer.headers["X-Peloton-Served-From"] == "views"
        assert answer.headers["X-Peloton-Store"].startswith(f"the store (SQLite at {api.path})")
        served[path] = answer.json()
    assert [h["host_id"] for h in served["/v1/hosts"]["hosts"]] == ["h0", "h1"]
    assert [p["path"] for p in served["/v1/respools"]["children"]] == ["/a"]
    for method, path, needs, body in (("GET", "/v1/jobs/j1/tasks", "task list", None),
                                      ("POST", "/v1/jobs", "job create", {"pool": "/a", "config": JOB})):
        answer, took = timed(api, method, path, json=body)
        assert answer.status_code == 503 and took < 0.5, (path, answer.text, took)
        assert answer.json()["detail"].endswith(f": {needs} needs it")
    stranger, _row = issue("mallory", ["team-a"], False, now_ms=1)  # never seen: not let in without the store
    assert api.get("/v1/hosts", headers={"Authorization": f"Bearer {stranger}"}).status_code == 503
    setattr(api.switch, away, False)
    api.switch.released.set()
    deadline = time.monotonic() + 5
    while (answer := api.get("/v1/jobs/j1/status", headers=api.alice)).status_code != 200:
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.05)
    assert "X-Peloton-Served-From" not in api.get("/v1/hosts", headers=api.alice).headers


def test_job_status_and_task_list_name_the_stage_the_job_waits_on_and_its_silent_hosts(api) -> None:
    since_ms = int(time.time() * 1000) - 5_000
    api.app.state.stage_health = lambda: {
        "admit": StageHealth("admit", "OK", since_ms, "caught up; 1 member listed"),
        "launch": StageHealth("launch", "STOP", since_ms, "no member, and 12 messages wait")}
    status = api.get("/v1/jobs/j1/status", headers=api.alice).json()
    [problem] = status["stage_problems"]
    assert (problem["stage"], problem["effect"], problem["why"], problem["since_ms"]) == (
        "launch", "statuses not applied", "launch has no live instance", since_ms)
    assert status["silent_hosts"] == [{"host_id": "h1", "since_ms": 1_000, "tasks": 2}]
    listing = api.get("/v1/jobs/j1/tasks", headers=api.alice).json()
    assert [p["stage"] for p in listing["stage_problems"]] == ["launch"] and len(listing["tasks"]) == 2
    api.app.state.stage_health = lambda: {"launch": StageHealth("launch", "OK", since_ms, "caught up")}
    assert api.get("/v1/jobs/j1/status", headers=api.alice).json()["stage_problems"] == []
    # --wait polls without the reasons: none of this is asked for then
    assert "stage_problems" not in api.get("/v1/jobs/j1/status?why=false", headers=api.alice).json()
