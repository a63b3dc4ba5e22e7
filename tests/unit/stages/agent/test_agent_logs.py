"""An agent's log server: the API's grant for the run or nothing, a run's stdout and stderr and
nothing else, a byte range at a time, never through a link the task put there."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

import pytest

from peloton.auth.grants import GrantError, check, grant, new_key_pair, private_key, public_key
from stages.agent.logs import LogServer

PRIVATE, PUBLIC = new_key_pair()
KEY = private_key(PRIVATE)


@pytest.fixture
def server(tmp_path):
    sandbox = tmp_path / "sandboxes" / "job-0-1"
    sandbox.mkdir(parents=True)
    (sandbox / "stdout").write_bytes(b"hello\nworld\n")
    (tmp_path / "secret.txt").write_text("not yours")
    (tmp_path / "sandboxes" / "job-0-2").mkdir()
    os.symlink(tmp_path / "secret.txt", tmp_path / "sandboxes" / "job-0-2" / "stdout")
    logs = LogServer(tmp_path / "sandboxes", public_key(PUBLIC), {"host-a"}, keep_s=7 * 86400).start()
    yield logs
    logs.close()


def get(logs: LogServer, path: str, secret: str | None = "") -> tuple[int, bytes, dict]:
    """GET with a grant for the path's run (secret ""), with `secret` as the bearer, or with none."""
    if secret == "":
        secret = grant(KEY, path.split("/")[3] if path.count("/") >= 3 else "", "host-a")
    headers = {"Authorization": f"Bearer {secret}"} if secret is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(logs.url + path, headers=headers), timeout=10) as answer:
            return answer.status, answer.read(), dict(answer.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def test_the_api_reads_a_runs_output_a_range_at_a_time(server) -> None:
    status, body, headers = get(server, "/v1/sandboxes/job-0-1/stdout")
    assert (status, body, headers["X-File-Size"]) == (200, b"hello\nworld\n", "12")
    assert get(server, "/v1/sandboxes/job-0-1/stdout?offset=6&limit=3")[1] == b"wor"
    assert get(server, "/v1/sandboxes/job-0-1/stdout?offset=99")[1] == b""
    assert get(server, "/v1/sandboxes/job-0-1/stderr")[0] == 404  # not written
    assert get(server, "/v1/sandboxes/job-9-1/stdout")[1] == (
        b"no stdout of run job-9-1 on this host (sandboxes are removed 7 days after their run ended: "
        b"PELOTON_SANDBOX_KEEP_S)\n")


def test_nobody_but_the_api_and_nothing_but_a_runs_files(server) -> None:
    assert get(server, "/v1/sandboxes/job-0-1/stdout", secret=None)[0] == 401
    assert get(server, "/v1/sandboxes/job-0-1/stdout", secret="guess")[0] == 403
    assert get(server, "/v1/sandboxes/job-0-2/stdout")[0] == 404  # a link the task made: not followed
    for path in ("/v1/sandboxes/../secret.txt/stdout", "/v1/sandboxes/job-0-1/../../secret.txt",
                 "/v1/sandboxes/job-0-1/environ", "/v1/sandboxes/..%2F/stdout",
                 "/v1/sandboxes/job-0-1/stdout?offset=x"):
        status, body, _ = get(server, path)
        assert status in (400, 404) and b"not yours" not in body, path


def test_a_grant_opens_one_run_on_one_host_for_a_minute_and_only_the_apis_key_makes_one(server) -> None:
    other = grant(KEY, "job-0-2", "host-a")
    status, body, _ = get(server, "/v1/sandboxes/job-0-1/stdout", secret=other)
    assert status == 403 and b"the grant is for run 'job-0-2', not 'job-0-1'" in body, body
    status, body, _ = get(server, "/v1/sandboxes/job-0-1/stdout", secret=grant(KEY, "job-0-1", "host-b"))
    assert status == 403 and b"for host 'host-b', which this agent does not run" in body, body
    stale = grant(KEY, "job-0-1", "host-a", now=time.time() - 120)
    status, body, _ = get(server, "/v1/sandboxes/job-0-1/stdout", secret=stale)
    assert status == 403 and b"expired" in body, body
    forged = grant(private_key(new_key_pair()[0]), "job-0-1", "host-a")  # a key of someone else's
    status, body, _ = get(server, "/v1/sandboxes/job-0-1/stdout", secret=forged)
    assert status == 403 and b"not a grant of this cluster's API" in body, body
    with pytest.raises(GrantError, match="expired"):
        check(public_key(PUBLIC), grant(KEY, "t", "h", now=1000), "t", {"h"}, now=1061)
    with pytest.raises(ValueError, match="PELOTON_AGENT_LOGS_PUBLIC_KEY is not an Ed25519 public key"):
        public_key("not-a-key")
