"""An agent's log server: the API's secret or nothing, a run's stdout and stderr and nothing else,
a byte range at a time, never through a link the task put there."""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import pytest

from stages.agent.logs import LogServer


@pytest.fixture
def server(tmp_path):
    sandbox = tmp_path / "sandboxes" / "job-0-1"
    sandbox.mkdir(parents=True)
    (sandbox / "stdout").write_bytes(b"hello\nworld\n")
    (tmp_path / "secret.txt").write_text("not yours")
    (tmp_path / "sandboxes" / "job-0-2").mkdir()
    os.symlink(tmp_path / "secret.txt", tmp_path / "sandboxes" / "job-0-2" / "stdout")
    logs = LogServer(tmp_path / "sandboxes", "s3cret", keep_s=7 * 86400).start()
    yield logs
    logs.close()


def get(logs: LogServer, path: str, secret: str | None = "s3cret") -> tuple[int, bytes, dict]:
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
    assert get(server, "/v1/sandboxes/job-0-1/stdout", secret="guess")[0] == 401
    assert get(server, "/v1/sandboxes/job-0-2/stdout")[0] == 404  # a link the task made: not followed
    for path in ("/v1/sandboxes/../secret.txt/stdout", "/v1/sandboxes/job-0-1/../../secret.txt",
                 "/v1/sandboxes/job-0-1/environ", "/v1/sandboxes/..%2F/stdout", "/v1/sandboxes/job-0-1/stdout?offset=x"):
        status, body, _ = get(server, path)
        assert status in (400, 404) and b"not yours" not in body, path
