"""pelotonctl through the API: a real HTTP server (uvicorn, in a thread) before a real SQLite
store, with no broker (commands are recorded). The same commands, outputs and exit codes as
directly, plus exit 6 for what the token's user may not do."""

from __future__ import annotations

import json
import threading
import time

import pytest
import uvicorn
from typer.testing import CliRunner

from peloton.auth.tokens import issue
from peloton.config import Settings
from peloton.model.jobconfig import parse_job_config
from peloton.model.pool import parse_pool_config
from peloton.runtime import RecordingEmitter, StaticView
from peloton.store import open_store
from pelotonctl.api.app import make_app
from pelotonctl.api.audit import Audit
from pelotonctl.cli import app
from pelotonctl.dev.processes import free_port
from stages.admit.expand import expand_job
from tests.builders.api import HOST, JOB, RESOURCES

runner = CliRunner()


@pytest.fixture
def served(tmp_path):
    store = open_store(tmp_path / "peloton.db")
    store.put_pool("/a", parse_pool_config("name: a\nowningTeam: team-a\n" + RESOURCES, "/a"))
    store.put_pool("/b", parse_pool_config("name: b\nowningTeam: team-b\n" + RESOURCES, "/b"))
    job, tasks = expand_job("j1", "/a", parse_job_config(JOB), JOB, 1)
    store.create_jobs([job], tasks)
    tokens = {}
    for user, group in (("alice", "team-a"), ("bob", "team-b")):
        tokens[user], row = issue(user, [group], False, now_ms=1)
        store.add_token(row)
    out = RecordingEmitter("api")
    # No job manager here: a command's wait ends at once, pending.
    settings = Settings(home=tmp_path, store=str(tmp_path / "peloton.db"), command_wait_s=0.05)
    api = make_app(settings, store, out, Audit(RecordingEmitter("api"), 1.0), StaticView({"h0": HOST}))
    port = free_port()  # below the ephemeral range: no outgoing connection takes it meanwhile
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    (tmp_path / "hello.yaml").write_text(JOB)

    def ctl(user: str | None, *args: str):
        env = {"PELOTON_HOME": str(tmp_path / "elsewhere"), "PELOTON_API_URL": f"http://127.0.0.1:{port}",
               "PELOTON_TOKEN": tokens.get(user, "")}
        return runner.invoke(app, list(args), env=env)

    ctl.out, ctl.file, ctl.port, ctl.store = out, str(tmp_path / "hello.yaml"), port, store
    yield ctl
    server.should_exit = True
    thread.join(10)
    store.close()


def test_commands_go_through_the_api_as_the_tokens_user(served) -> None:
    made = served("alice", "job", "create", "/a", served.file)
    assert made.exit_code == 0, made.output
    [(_t, key, _s, command)] = served.out.take("job-commands")
    assert made.output == f"Job {key} created\n" and command["requested_by"] == "alice"  # Peloton's words
    made = served("alice", "job", "create", "/a", served.file, "--json")
    [(_t, key, _s, _c)] = served.out.take("job-commands")
    assert json.loads(made.output) == {"job_id": key}
    got = served("alice", "job", "get", "j1", "--json")
    assert got.exit_code == 0 and '"pool": "/a"' in got.output
    listed = served("alice", "task", "list", "j1", "--json")
    assert listed.exit_code == 0 and listed.output.count('"instance"') == 2
    assert served("alice", "job", "query", "--json").output.count('"job_id"') == 1
    assert served("alice", "host", "list", "--json").exit_code == 0
    stopped = served("alice", "job", "stop", "j1", "--instances", "1")
    assert stopped.exit_code == 0 and "stopping 1 tasks" in stopped.output


def test_what_the_user_may_not_do_exits_6_with_the_reason_and_sends_nothing(served) -> None:
    refused = served("alice", "job", "create", "/b", served.file)
    assert refused.exit_code == 6
    assert "not permitted: job.create on /b refused: alice is in none of team-b" in refused.output
    stop = served("bob", "job", "stop", "j1")
    assert stop.exit_code == 6 and "bob is in none of team-a" in stop.output
    assert served("bob", "job", "get", "j1").exit_code == 6
    pool = served("alice", "respool", "delete", "/a")
    assert pool.exit_code == 6 and "pool.delete on /a refused" in pool.output
    nobody = served(None, "job", "list")
    assert nobody.exit_code == 6 and "no token" in nobody.output
    assert served.out.take("job-commands") == []


def test_invalid_input_and_unknown_things_keep_their_exit_codes(served) -> None:
    bad = served("alice", "job", "create", "/nowhere", served.file)
    assert bad.exit_code == 2 and f"{served.file}: unknown resource pool '/nowhere'" in bad.output
    assert served("alice", "job", "status", "nope").exit_code == 3
    assert served("alice", "task", "get", "j1", "7").exit_code == 3


def test_an_api_that_does_not_answer_exits_5(tmp_path) -> None:
    port = free_port()
    result = runner.invoke(app, ["job", "list"], env={"PELOTON_HOME": str(tmp_path),
                                                      "PELOTON_API_URL": f"http://127.0.0.1:{port}",
                                                      "PELOTON_TOKEN": "x"})
    assert result.exit_code == 5 and f"the API at http://127.0.0.1:{port} does not answer" in result.output


def test_tokens_are_an_admins_through_the_api_and_the_operators_in_the_store(served, tmp_path) -> None:
    refused = served("alice", "auth", "issue", "--user", "eve", "--group", "team-a")
    assert refused.exit_code == 6 and "token.issue on eve refused" in refused.output
    assert served("alice", "auth", "list").exit_code == 6
    # Without an API: the store itself (the way in before any token exists).
    direct = {"PELOTON_HOME": str(tmp_path / "operator"), "PELOTON_STORE": str(tmp_path / "operator.db")}
    made = runner.invoke(app, ["auth", "issue", "--user", "root", "--admin", "--json"], env=direct)
    assert made.exit_code == 0, made.output
    token_id = json.loads(made.output)["token_id"]
    listed = json.loads(runner.invoke(app, ["auth", "list", "--json"], env=direct).output)
    assert [(t["token_id"], t["user"], t["admin"]) for t in listed] == [(token_id, "root", True)]
    assert runner.invoke(app, ["auth", "revoke", token_id], env=direct).exit_code == 0
    again = runner.invoke(app, ["auth", "revoke", token_id], env=direct)
    assert again.exit_code == 3 and "not revoked already" in again.output


def test_pelotons_listings_answer_the_same_through_the_api_and_directly(served, tmp_path) -> None:
    from tests.builders.queries import seed

    seed(served.store)  # alice's team owns /a and /a/x below it; /b is bob's
    direct = {"PELOTON_HOME": str(tmp_path / "operator"), "PELOTON_STORE": str(tmp_path / "peloton.db")}
    for args, field, expected in (
            (["job", "query", "-s", "pending,JOB_STATE_SUCCEEDED", "-r", "/a", "-k", "NIGHTLY"], "job_id", ["etl"]),
            (["job", "query", "--labels", "tier=2", "--respool", "/a/x", "--sort", "name", "--sortorder", "ASC",
              "--limit", "5", "--offset", "0", "--total", "10"], "job_id", ["backup"]),
            (["task", "query", "etl", "--states", "RUNNING,FAILED", "--hosts", "h2"], "instance", [2]),
            (["task", "query", "etl", "-p", "state", "-a", "DESC", "-n", "2", "-o", "1"], "instance", [1, 0]),
            (["resmgr", "active-list", "--states", "RUNNING"], "task_id", ["etl-1-1"]),
            (["resmgr", "tasks", "active", "--job", "backup"], "task_id", ["backup-0-1", "backup-1-1", "backup-2-1"]),
            (["resmgr", "tasks", "pending", "/a", "--limit", "1"], "gang_id", ["backup-2-1"]),
            (["resmgr", "tasks", "orphan", "-r", "/a"], "task_id", ["etl-0-7"])):  # its task is at run 1
        via_api, directly = served("alice", *args, "--json"), runner.invoke(app, [*args, "--json"], env=direct)
        assert via_api.exit_code == directly.exit_code == 0, (args, via_api.output, directly.output)
        rows = json.loads(via_api.output)
        assert rows == json.loads(directly.output) and [r[field] for r in rows] == expected, (args, rows)
    table = served("alice", "resmgr", "pending")
    assert table.exit_code == 0 and "backup-2-1" in table.output and "controller" in table.output
    # What alice may not read is skipped in a listing, and refused when named.
    assert json.loads(served("bob", "resmgr", "active-list", "--json").output) == []
    refused = served("bob", "resmgr", "pending", "/a")
    assert refused.exit_code == 6 and "job.read on /a refused" in refused.output
    assert served("bob", "task", "query", "etl").exit_code == 6


def test_hosts_are_queried_by_pelotons_host_states_through_the_api(served) -> None:
    up = served("alice", "host", "query", "--states", "HOST_STATE_UP,HOST_STATE_DRAINING", "--json")
    assert up.exit_code == 0 and [h["host_id"] for h in json.loads(up.output)["hosts"]] == ["h0"]
    assert json.loads(served("alice", "host", "query", "-s", "DOWN", "--json").output) == {"hosts": []}
    assert "h0" in served("alice", "host", "query").output
    invalid = served("alice", "host", "query", "--states", "HOST_STATE_INVALID")
    assert invalid.exit_code == 2 and "no host here is in Peloton's HOST_STATE_INVALID" in invalid.output


def test_a_query_word_that_means_nothing_here_exits_2_naming_it(served) -> None:
    for args, says in ((["job", "query", "--states", "RUNING"], "state RUNING: job states are"),
                       (["job", "query", "--sort", "start_time"], "jobs here keep no start time"),
                       (["job", "query", "--sortorder", "UP"], "sort order 'UP': ASC or DESC"),
                       (["job", "query", "--labels", "tier"], "label 'tier': expected KEY=VALUE"),
                       (["task", "query", "j1", "--states", "RESERVED"], "no task here is RESERVED"),
                       (["task", "query", "j1", "--sort", "cpu"], "tasks sort by creation_time, host"),
                       (["resmgr", "active-list", "--respool", "0d2f-pool-id"], "pools here are named by their path")):
        result = served("alice", *args)
        assert result.exit_code == 2 and says in result.output, (args, result.output)
    assert served("alice", "resmgr", "pending", "/nowhere").exit_code == 3


def test_pelotons_global_json_flag_job_ids_of_ones_own_and_active_list(served, capsys) -> None:
    from pelotonctl.cli.main import peloton_json_flag

    args = peloton_json_flag(["-j", "job", "get", "j1"])
    assert args == ["job", "get", "j1", "--json"]
    got = served("alice", *args)
    assert got.exit_code == 0 and json.loads(got.output)["pool"] == "/a"
    assert peloton_json_flag(["job", "get", "j1"]) == ["job", "get", "j1"]  # nothing to move
    for words, says in ((["-j", "job"], "`pelotonctl job` has no JSON output (name a command)"),
                        (["-j", "task", "logs", "j1", "0"], "`pelotonctl task logs` has no")):
        with pytest.raises(SystemExit) as exited:
            peloton_json_flag(words)
        assert exited.value.code == 2 and says in capsys.readouterr().err, words
    # job create -i/--jobID: the id given, and refused when a job has it already
    made = served("alice", "job", "create", "-i", "mine", "/a", served.file)
    assert made.exit_code == 0 and made.output == "Job mine created\n", made.output
    [(_t, key, _s, command)] = served.out.take("job-commands")
    assert key == command["job_id"] == "mine"
    taken = served("alice", "job", "create", "--jobID", "j1", "/a", served.file)
    assert taken.exit_code == 2 and "job j1 exists already (in /a, PENDING): a job id names one job" in taken.output
    assert served.out.take("job-commands") == []
    served.store.create_jobs([expand_job("gone", "/a", parse_job_config(JOB), JOB, 2)[0]], [])
    served.store.delete_job("gone", 1_795_000_000_000)
    deleted = served("alice", "job", "create", "-i", "gone", "/a", served.file)
    assert deleted.exit_code == 2 and "job gone was deleted at 2026-11-18 11:06 UTC; its id can be used again" \
        in deleted.output, deleted.output
    assert served.out.take("job-commands") == []
    # job active-list: the jobs not ended
    done, tasks = expand_job("old", "/a", parse_job_config(JOB), JOB, 2)
    done.state, done.completed_ms = "SUCCEEDED", 1_000
    served.store.create_jobs([done], tasks)
    active = served("alice", "job", "active-list", "--json")
    assert active.exit_code == 0 and [j["job_id"] for j in json.loads(active.output)] == ["j1"], active.output
    # a job that ended says when it goes (PELOTON_JOB_RETENTION_S after its end); a running one not
    assert json.loads(served("alice", "job", "get", "old", "--json").output)["runtime"]["kept_until_ms"] == \
        1_000 + 30 * 86_400_000
    assert json.loads(served("alice", "job", "get", "j1", "--json").output)["runtime"]["kept_until_ms"] is None
