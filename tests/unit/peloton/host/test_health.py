"""Health checks: read at submission, run by the agent's driver (real commands, a real HTTP
server on localhost), and what they do to a run and to an update's batch."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from peloton.host.driver import LaunchRequest
from peloton.host.health import HealthChecks, run_check
from peloton.host.local import LocalDriver
from peloton.model.health import (
    COMMAND,
    HEALTH_UNKNOWN,
    HEALTHY,
    HTTP,
    UNHEALTHY,
    HealthCheck,
    parse_health_check,
    serving,
)
from peloton.model.jobconfig import job_spec_from_dict
from peloton.model.jobspec import JobConfigError
from peloton.model.mesos import MesosState, Reason
from stages.admit.workflow import UpdateOptions, advance, new_workflow

FAST = dict(initial_interval_s=0, interval_s=0.05, timeout_s=2)


# --- the model ---------------------------------------------------------------------------


def test_pelotons_defaults_apply_and_a_check_without_enabled_is_no_check() -> None:
    check, problems = parse_health_check({"enabled": True, "type": "COMMAND", "commandcheck": {"command": "true"}})
    assert problems == [] and check == HealthCheck(COMMAND, command="true", initial_interval_s=15, interval_s=10,
                                                   max_consecutive_failures=3, timeout_s=20)
    assert parse_health_check({"type": "COMMAND", "commandcheck": {"command": "true"}}) == (None, [])
    http_check, _ = parse_health_check({"enabled": True, "type": 2, "httpcheck": {"port": 8080, "path": "/up"}})
    assert (http_check.type, http_check.http_port, http_check.http_path) == (HTTP, 8080, "/up")
    assert HealthCheck.from_json(http_check.to_json()) == http_check
    assert HealthCheck.from_json(None) is None
    stateless, _ = parse_health_check({"enabled": True, "type": "HEALTH_CHECK_TYPE_HTTP", "httpcheck": {"port": 80}})
    assert stateless.type == HTTP  # the v1alpha word


@pytest.mark.parametrize(("block", "said"), [
    ({"type": "TCP"}, "healthcheck.type: 'TCP' is not a health check type"),
    ({"type": "COMMAND"}, "healthcheck.commandcheck.command: a COMMAND health check needs a command"),
    ({"type": "HTTP", "httpcheck": {"port": 70000}}, "healthcheck.httpcheck.port: expected a port from 1 to 65535"),
    ({"type": "HTTP", "httpcheck": {"port": 80, "scheme": "ftp"}}, "healthcheck.httpcheck.scheme: 'ftp'"),
    ({"type": 1, "commandcheck": {"command": "x"}, "intervalsecs": "often"},
     "healthcheck.intervalsecs: expected a number of seconds, got 'often'"),
    ({"type": 1, "commandcheck": {"command": "x"}, "maxconsecutivefailures": 1.5},
     "healthcheck.maxconsecutivefailures: expected a whole number of failures"),
])
def test_a_bad_health_check_is_refused_at_submission_naming_the_field(block: dict, said: str) -> None:
    config = {"name": "svc", "type": "SERVICE", "instanceCount": 1,
              "defaultConfig": {"resource": {"cpuLimit": 0.1, "memLimitMb": 8},
                                "command": {"value": "sleep 100"}, "healthCheck": {"enabled": True, **block}}}
    with pytest.raises(JobConfigError) as refused:
        job_spec_from_dict(config)
    assert said in str(refused.value)


def test_a_run_serves_once_running_and_healthy_where_it_has_a_check() -> None:
    assert serving("RUNNING", "") and serving("RUNNING", "DISABLED") and serving("RUNNING", HEALTHY)
    assert not serving("RUNNING", HEALTH_UNKNOWN) and not serving("RUNNING", UNHEALTHY)
    assert not serving("LAUNCHED", HEALTHY)


# --- the checks, run -----------------------------------------------------------------------


def wait_for(checks: HealthChecks, count: int, timeout: float = 10.0) -> list:
    news, deadline = [], time.monotonic() + timeout
    while len(news) < count and time.monotonic() < deadline:
        news.extend(checks.step(time.monotonic()))
        time.sleep(0.01)
    return news


def test_a_passing_command_makes_the_run_healthy_once_and_a_failing_one_unhealthy_after_n_in_a_row(
        tmp_path: Path) -> None:
    checks = HealthChecks()
    checks.watch("good", HealthCheck(COMMAND, command="test -f ok", **FAST), tmp_path, {"PATH": "/usr/bin:/bin"},
                 time.monotonic())
    (tmp_path / "ok").write_text("")
    checks.watch("bad", HealthCheck(COMMAND, command="echo no such thing; exit 3", max_consecutive_failures=3, **FAST),
                 tmp_path, {"PATH": "/usr/bin:/bin"}, time.monotonic())
    news = wait_for(checks, 2)
    by_task = {n.task_id: n for n in news}
    assert by_task["good"].health == HEALTHY and not by_task["good"].kill
    assert by_task["bad"].health == UNHEALTHY and by_task["bad"].kill
    assert "failed 3 times in a row: command exited with code 3: no such thing" in by_task["bad"].message
    time.sleep(0.2)
    assert checks.step(time.monotonic()) == []  # healthy stays so without news; the bad one is given up
    checks.close()


def test_a_check_that_takes_longer_than_its_timeout_fails(tmp_path: Path) -> None:
    ok, detail = run_check(HealthCheck(COMMAND, command="sleep 5", timeout_s=0.2), tmp_path, {"PATH": "/bin"}, {})
    assert not ok and detail == "command timed out after 0.2s"


def test_an_http_check_passes_on_2xx_and_3xx_and_fails_on_errors_and_refusals(tmp_path: Path) -> None:
    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the standard library's name)
            self.send_response({"/up": 200, "/moved": 302, "/down": 503}.get(self.path, 404))
            self.send_header("Location", "/up")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        def check(path: str) -> tuple[bool, str]:
            return run_check(HealthCheck(HTTP, http_port=port, http_path=path, timeout_s=2), tmp_path, {}, {})

        assert check("/up") == (True, f"GET http://127.0.0.1:{port}/up: 200")
        assert check("/moved")[0]
        assert check("/down") == (False, f"GET http://127.0.0.1:{port}/down: 503")
    finally:
        server.shutdown()
        server.server_close()
    ok, detail = run_check(HealthCheck(HTTP, http_port=port, timeout_s=1), tmp_path, {}, {})
    assert not ok and "Connection refused" in detail


def test_the_local_driver_reports_health_and_kills_an_unhealthy_run_as_failed(tmp_path: Path) -> None:
    driver = LocalDriver(tmp_path / "sandboxes", close_timeout=5)
    healthy = HealthCheck(COMMAND, command="test -n \"$PELOTON_TASK_ID\"", **FAST).to_json()
    failing = HealthCheck(COMMAND, command="exit 1", max_consecutive_failures=2, **FAST).to_json()
    common = dict(job_id="svc", instance=0, run_id=1, host_id="h", command="sleep 60", shell=True,
                  kill_grace_seconds=1)
    driver.launch([LaunchRequest(task_id="svc-0-1", health_check=healthy, **common),
                   LaunchRequest(task_id="svc-1-1", health_check=failing, **{**common, "instance": 1})])
    seen, deadline = [], time.monotonic() + 15
    while time.monotonic() < deadline and not any(u.task_id == "svc-1-1" and u.terminal for u in seen):
        seen.extend(driver.poll())
        time.sleep(0.02)
    mine = [(u.state, u.health) for u in seen if u.task_id == "svc-0-1"]
    assert mine[:2] == [("TASK_STARTING", ""), (MesosState.TASK_RUNNING, HEALTH_UNKNOWN)]
    assert (MesosState.TASK_RUNNING, HEALTHY) in mine
    theirs = [u for u in seen if u.task_id == "svc-1-1"]
    assert [(u.state, u.health) for u in theirs][-2:] == [(MesosState.TASK_RUNNING, UNHEALTHY),
                                                           (MesosState.TASK_FAILED, "")]
    assert theirs[-2].reason == Reason.HEALTH_CHECK_STATUS_UPDATED
    assert theirs[-1].reason == Reason.TASK_UNHEALTHY
    assert theirs[-1].message.startswith("killed: health check failed 2 times in a row: command exited with code 1")
    assert driver.active() == {"svc-0-1"}  # the healthy one runs on
    driver.close()


# --- what health means to an update --------------------------------------------------------


def test_an_update_batch_waits_for_its_new_runs_to_be_healthy() -> None:
    wf = new_workflow("u1", "j", "RESTART", [0, 1], UpdateOptions(batch_size=1), 1, 1, "me", 0)
    tasks = {i: SimpleNamespace(instance=i, run_id=1, state="RUNNING", health=HEALTHY, failures=0, reason="",
                                host_id="h") for i in (0, 1)}
    step = advance(wf, tasks, 1)
    assert step.replace == [0]
    tasks[0] = SimpleNamespace(**{**vars(tasks[0]), "run_id": 2, "health": HEALTH_UNKNOWN})
    step = advance(step.workflow, tasks, 2)
    assert step.replace == [] and step.workflow["in_flight"] == [0]  # running, not yet healthy
    tasks[0].health = HEALTHY
    step = advance(step.workflow, tasks, 3)
    assert step.replace == [1] and step.workflow["done"] == [0]
