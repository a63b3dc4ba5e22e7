"""pelotonctl through the API (a real HTTP server in a thread, a real SQLite store, no broker) when
what is behind a job is not doing its part: job status and task list say which stage the job waits
on and which of its hosts are silent; with the store away, a read that needs it exits 5 with one
line naming the store, and one served from the API's views says so on stderr."""

from __future__ import annotations

import threading
import time

import pytest
import uvicorn
from typer.testing import CliRunner

from pelotonctl.cli import app
from pelotonctl.dev.processes import free_port
from pelotonctl.health import StageHealth, clock
from tests.builders.api import HOST
from tests.builders.store_away import api_over_switch

runner = CliRunner()
SINCE_MS = int(time.time() * 1000) - 60_000
SILENT = {**HOST, "host_id": "h1", "state": "DOWN", "reachable": False, "updated_ms": SINCE_MS, "job_tasks": {"j1": 2}}


@pytest.fixture
def served(tmp_path):
    api, switch, token = api_over_switch(tmp_path, SILENT)
    api.state.stage_health = lambda: {"launch": StageHealth("launch", "STOP", SINCE_MS, "no member")}
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)

    def ctl(*args: str):
        env = {"PELOTON_HOME": str(tmp_path / "elsewhere"), "PELOTON_API_URL": f"http://127.0.0.1:{port}",
               "PELOTON_TOKEN": token}
        return runner.invoke(app, list(args), env=env)

    ctl.switch, ctl.path = switch, str(tmp_path / "peloton.db")
    yield ctl
    server.should_exit = True
    thread.join(10)
    switch.store.close()


def test_job_status_and_task_list_say_the_stage_the_job_waits_on_and_its_silent_host(served) -> None:
    status = served("job", "status", "j1")
    assert status.exit_code == 0, status.output
    lines = status.output.splitlines()
    assert lines[2] == f"statuses not applied since {clock(SINCE_MS)}: launch has no live instance", lines
    assert lines[3] == (f"host h1 silent since {clock(SINCE_MS)}: its agent stopped reporting, so what runs there is "
                        f"not known; 2 tasks of this job were there")
    listed = served("task", "list", "j1")
    assert listed.exit_code == 0 and "launch has no live instance" in listed.output.splitlines()[-2], listed.output
    as_json = served("task", "list", "j1", "--json")
    assert as_json.exit_code == 0 and as_json.stdout.lstrip().startswith("[")  # the rows, as before
    assert "warning: statuses not applied since" in as_json.stderr


def test_with_the_store_gone_a_read_exits_5_naming_it_and_a_view_read_says_it_was_served_without_it(served) -> None:
    assert served("host", "list").exit_code == 0  # the token, known to the API
    served.switch.stopped = True
    status = served("job", "status", "j1")
    assert status.exit_code == 5
    [line] = status.stderr.strip().splitlines()
    assert line.startswith(f"error: the store (SQLite at {served.path}) is unavailable (unable to open database "
                           f"file): job status needs it (answered by the API at http://127.0.0.1:"), line
    hosts = served("host", "list")
    assert hosts.exit_code == 0 and "h1" in hosts.stdout, hosts.output
    assert hosts.stderr.startswith(f"note: served from the API's views without the store: the store (SQLite at "
                                   f"{served.path})"), hosts.stderr
