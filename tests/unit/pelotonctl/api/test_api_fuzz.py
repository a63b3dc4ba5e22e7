"""The API fuzzed from its own OpenAPI document (schemathesis), a bounded number of cases per
operation: whatever a caller sends, no answer is a server error, and a caller changes nothing it may
not change. Bob (team-b) owns no pool here; alice's job in /a and the pools must come out as they
went in. No broker: commands are recorded, hosts are hand-fed. The event streams and lag are left out
(they read the broker); tests/integration/test_api.py and test_front_door.py cover them."""

from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings

from peloton.config import Settings
from peloton.runtime import RecordingEmitter, StaticView
from pelotonctl.api.app import make_app
from pelotonctl.api.audit import Audit
from tests.builders.api import HOST, seeded_store

HOME = Path(tempfile.mkdtemp(prefix="peloton-api-fuzz-"))
STORE, BOB = seeded_store(HOME / "peloton.db", "bob", ["team-b"])
SENT = RecordingEmitter("api")
APP = make_app(Settings(home=HOME, store=str(HOME / "peloton.db"), bootstrap="127.0.0.1:9", command_wait_s=0.01),
               STORE, SENT, Audit(RecordingEmitter("api"), 1.0), StaticView({"h0": HOST}))
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP).exclude(path_regex="events|lag")
CASES = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


@SCHEMA.parametrize()
@CASES
def test_no_request_of_a_user_without_rights_is_a_server_error_or_changes_anything(case) -> None:
    answer = case.call(headers={"Authorization": f"Bearer {BOB}"})
    assert answer.status_code < 500, (case.method, case.formatted_path, answer.status_code, answer.text[:300])
    assert SENT.take("job-commands") == [] and SENT.take("placements") == []
    assert set(STORE.list_pools()) == {"/a"} and [t.user for t in STORE.list_tokens()] == ["bob"]
    assert STORE.get_job("j1") is not None


@SCHEMA.parametrize()
@CASES
def test_without_a_token_every_operation_but_the_probes_answers_401(case) -> None:
    answer = case.call()
    assert answer.status_code < 500, (case.method, case.formatted_path, answer.status_code, answer.text[:300])
    if case.path not in ("/healthz", "/metrics", "/openapi.json"):
        # Refused before anyone is asked, for its shape alone: a body that does not parse (400), a path
        # no route takes (404), a method the path does not have (405), what the schema refuses (422).
        assert answer.status_code in (400, 401, 404, 405, 422), (case.method, case.formatted_path,
                                                                 answer.status_code)
