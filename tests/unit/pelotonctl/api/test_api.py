

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from peloton.auth.tokens import issue
from peloton.config import Settings
from peloton.model.pool import parse_pool_config
from peloton.runtime import RecordingEmitter, StaticView
from peloton.store import open_store
from pelotonctl.api.app import make_app
from pelotonctl.api.audit import Audit
from tests.builders.api import HOST, JOB, RESOURCES


@pytest.fixture
def api(tmp_path):
    store = open_store(tmp_path / "peloton.db")
    store.put_pool("/a", parse_pool_config("name: a\nowningTeam: team-a\n" + RESOURCES, "/a"))
    store.put_pool("/b", parse_pool_config("name: b\nowningTeam: team-b\n" + RESOURCES, "/b"))
    tokens = {}
    for user, group, admin in (("alice", "team-a", False), ("bob", "team-b", False), ("root", "ops", True)):
        token, row = issue(user, [group], admin, now_ms=1)
        store.add_token(row)
        tokens[user] = {"Authorization": f"Bearer {token}"}
    out, trail = RecordingEmitter("api"), RecordingEmitter("api")
    settings = Settings(home=tmp_path, store=str(tmp_path / "peloton.db"), command_wait_s=0.05)
    app = make_app(settings, store, out, Audit(trail, 1.0), StaticView({"h0": HOST}))
    with TestClient(app) as client:
        client.tokens, client.out, client.trail, client.store = tokens, out, trail, store
        yield client
    store.close()


def decisions(api) -> list[tuple[str, str, str, bool]]:
    return [(v["user"], v["action"], v["object"], v["allowed"]) for _t, _k, _s, v in api.trail.take("audit")]


def test_nothing_but_probes_answers_without_a_token(api) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    assert "python_info" in api.get("/metrics").text
    assert "/v1/jobs" in api.get("/openapi.json").json()["paths"]
    for method, path in (("get", "/v1/jobs"), ("post", "/v1/jobs"), ("get", "/v1/hosts"), ("get", "/v1/respools")):
        answer = api.request(method, path, json={"pool": "/a", "config": JOB})
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer", (path, answer.text)
        assert "no token" in answer.json()["detail"]
    bad = api.get("/v1/jobs", headers={"Authorization": "Bearer plt_000000000000_" + "x" * 43})
    assert bad.status_code == 401 and bad.json()["detail"] == "unknown token"
    assert all(not allowed and user == "" for user, _a, _o, allowed in decisions(api))


def test_a_team_submits_to_its_pool_and_is_refused_elsewhere_with_the_reason(api) -> None:
    made = api.post("/v1/jobs", json={"pool": "/a", "config": JOB}, headers=api.tokens["alice"])
    assert made.status_code == 201, made.text
    job_id, command_id = made.json()["job_id"], made.json()["command_id"]
    [(_topic, key, schema, command)] = api.out.take("job-commands")
    assert (key, schema, command["command_id"], command["requested_by"]) == (job_id, "peloton.JobCommand",
                                                                             command_id, "alice")
    refused = api.post("/v1/jobs", json={"pool": "/b", "config": JOB}, headers=api.tokens["alice"])
    assert refused.status_code == 403
    assert refused.json()["detail"] == "job.create on /b refused: alice is in none of team-b, the groups that own /b"
    assert api.out.take("job-commands") == []  # nothing sent for a refusal
    assert decisions(api) == [("alice", "job.create", "/a", True), ("alice", "job.create", "/b", False)]


def test_invalid_jobs_and_unknown_pools_answer_at_once(api) -> None:
    bad = api.post("/v1/jobs", json={"pool": "/a", "config": "name: x\ninstanceCount: -1\n"},
                   headers=api.tokens["alice"])
    assert bad.status_code == 400 and "invalid job config:" in bad.json()["detail"]
    unknown = api.post("/v1/jobs", json={"pool": "/nowhere", "config": JOB}, headers=api.tokens["alice"])
    assert unknown.status_code == 400 and unknown.json()["detail"].startswith("unknown resource pool '/nowhere'")
    assert api.post("/v1/jobs", json={"pool": "/a"}, headers=api.tokens["alice"]).status_code == 422


def test_only_the_owners_read_and_control_a_job(api) -> None:
    from peloton.model.jobconfig import parse_job_config
    from pelotonctl.admin import check_job  # noqa: F401 -- the same checks the API ran
    from stages.admit.expand import expand_job

    job, tasks = expand_job("j1", "/a", parse_job_config(JOB), JOB, 1)
    api.store.create_jobs([job], tasks)
    assert api.get("/v1/jobs/j1", headers=api.tokens["alice"]).json()["pool"] == "/a"
    assert [t["instance"] for t in api.get("/v1/jobs/j1/tasks", headers=api.tokens["alice"]).json()["tasks"]] == [0, 1]
    assert api.get("/v1/jobs/j1", headers=api.tokens["bob"]).status_code == 403
    stop = api.post("/v1/jobs/j1/stop", json={}, headers=api.tokens["bob"])
    assert stop.status_code == 403 and "bob is in none of team-a" in stop.json()["detail"]
    assert api.out.take("job-commands") == []
    stopped = api.post("/v1/jobs/j1/stop", json={"instances": "1"}, headers=api.tokens["alice"])
    assert stopped.status_code == 200 and stopped.json()["instances"] == [1] and stopped.json()["command_id"]
    assert api.get("/v1/jobs/nope", headers=api.tokens["alice"]).status_code == 404
    # A listing shows what the caller may read, a page at a time.
    assert [j["job_id"] for j in api.get("/v1/jobs", headers=api.tokens["alice"]).json()["jobs"]] == ["j1"]
    assert api.get("/v1/jobs", headers=api.tokens["bob"]).json() == {"jobs": [], "next_offset": None}
    page = api.get("/v1/jobs", params={"limit": 1, "offset": 1}, headers=api.tokens["root"]).json()
    assert page == {"jobs": [], "next_offset": None}


def test_pools_hosts_and_tokens_change_only_by_administrators(api) -> None:
    team = "name: c\nowningTeam: team-c\n" + RESOURCES
    refused = api.post("/v1/respools/c", json={"config": team}, headers=api.tokens["alice"])
    assert refused.status_code == 403 and "is for administrators" in refused.json()["detail"]
    assert api.post("/v1/respools/c", json={"config": team}, headers=api.tokens["root"]).status_code == 201
    assert "/c" in api.store.list_pools()
    assert api.get("/v1/hosts", headers=api.tokens["bob"]).json()["hosts"][0]["host_id"] == "h0"
    assert api.post("/v1/hosts/h0/maintenance/start", json={}, headers=api.tokens["bob"]).status_code == 403
    assert api.post("/v1/tokens", json={"user": "eve", "admin": True}, headers=api.tokens["alice"]).status_code == 403
    issued = api.post("/v1/tokens", json={"user": "carol", "groups": ["team-c"]}, headers=api.tokens["root"]).json()
    carol = {"Authorization": f"Bearer {issued['token']}"}
    assert api.post("/v1/jobs", json={"pool": "/c", "config": JOB}, headers=carol).status_code == 201
    assert api.delete(f"/v1/tokens/{issued['token_id']}", headers=api.tokens["root"]).status_code == 200
    gone = api.get("/v1/jobs", headers=carol)
    assert gone.status_code == 401 and "revoked" in gone.json()["detail"]


def test_a_stream_position_names_every_partition_and_what_it_passed() -> None:
    from pelotonctl.api.stream import Position

    at = Position.parse("0:41.2;3:7.-1")
    assert str(at) == "0:41.2;3:7.-1"
    assert at.passed(0, 41, 2) and at.passed(0, 40, 9) and not at.passed(0, 41, 3) and not at.passed(1, 0, -1)
    assert Position.parse("garbage") is None and Position.parse(None) is None


def test_a_streamed_launching_step_shows_the_run_launched_as_its_history_does() -> None:
    from pelotonctl.api.stream import _events

    progress = {"event_id": "e", "job_id": "j", "state": "LAUNCHING", "timestamp_ms": 7,
                "runs": [{"instance": 0, "run_id": 1, "host_id": "h1"}, {"instance": 1, "run_id": 1, "host_id": "h2"}]}
    assert [(e["instance"], e["state"], e["host"]) for e in _events("peloton.TaskProgress", progress)] == [
        (0, "LAUNCHING", "h1"), (0, "LAUNCHED", "h1"), (1, "LAUNCHING", "h2"), (1, "LAUNCHED", "h2")]
    assert [e["state"] for e in _events("peloton.TaskProgress", {**progress, "state": "PLACED"})] == ["PLACED"] * 2
    runs = {"event_id": "e", "job_id": "j", "state": "TASK_FINISHED", "reason": "", "message": "", "exit_code": 0,
            "signal": None, "health": "", "timestamp_ms": 7, "runs": [{"instance": 3, "run_id": 2, "host_id": "h1",
                                                                      "offset_ms": 2}]}
    assert _events("peloton.TaskStatusRuns", runs) == [{
        "job_id": "j", "instance": 3, "run_id": 2, "state": "SUCCEEDED", "host": "h1", "reason": "", "message": "",
        "exit_code": 0, "health": "", "timestamp_ms": 9}]


def test_a_commands_status_says_what_the_job_manager_did_and_only_to_who_may_read_the_job(api) -> None:
    made = api.post("/v1/jobs", json={"pool": "/a", "config": JOB}, headers=api.tokens["alice"]).json()
    job_id, command_id = made["job_id"], made["command_id"]
    status = f"/v1/jobs/{job_id}/commands/{command_id}"
    assert api.get(status, headers=api.tokens["alice"]).status_code == 404  # nothing known of it yet
    api.store.refuse_command(command_id, job_id, "/a", "CREATE", "job refused: no host has 64 cpu", 5)
    answer = api.get(status, headers=api.tokens["alice"]).json()
    assert (answer["state"], answer["reason"]) == ("refused", "job refused: no host has 64 cpu")
    assert api.get(status, headers=api.tokens["bob"]).status_code == 403  # /a is team-a's
    assert api.get(f"/v1/jobs/{job_id}/commands/other", headers=api.tokens["alice"]).status_code == 404
    # A command of a stored job the job manager has not handled yet is pending.
    from peloton.model.jobconfig import parse_job_config
    from stages.admit.expand import expand_job

    job, tasks = expand_job("j1", "/a", parse_job_config(JOB), JOB, 1)
    api.store.create_jobs([job], tasks)
    stop = api.post("/v1/jobs/j1/stop", json={}, headers=api.tokens["alice"]).json()
    pending = api.get(f"/v1/jobs/j1/commands/{stop['command_id']}", headers=api.tokens["alice"]).json()
    assert pending["state"] == "pending" and "not handled yet, or handled more than 9 days ago" in pending["detail"]


def test_updates_are_read_and_steered_by_the_jobs_owners_only(api) -> None:
    from peloton.model.jobconfig import parse_job_config
    from stages.admit.expand import expand_job
    from stages.admit.workflow import UpdateOptions, new_workflow

    job, tasks = expand_job("j1", "/a", parse_job_config(JOB), JOB, 1)
    api.store.create_jobs([job], tasks)
    changed = JOB.replace("memLimitMb: 64", "memLimitMb: 128")
    sent = api.put("/v1/jobs/j1", json={"config": changed, "batch_size": 1, "max_instance_retries": 2,
                                        "max_failure_instances": 1, "rollback_on_failure": True},
                   headers=api.tokens["alice"]).json()
    assert sent["update_id"] == sent["command_id"] and sent["instances"] == [0, 1]
    [(_t, _k, _s, command)] = api.out.take("job-commands")
    assert (command["kind"], command["batch_size"], command["max_instance_retries"], command["max_failure_instances"],
            command["rollback_on_failure"], command["start_paused"]) == ("UPDATE", 1, 2, 1, True, False)
    # What the job manager stores when it acts on it:
    api.store.save_updates([new_workflow(sent["update_id"], "j1", "UPDATE", [0, 1], UpdateOptions(batch_size=1),
                                         1, 2, "alice", 5)])
    [listed] = api.get("/v1/jobs/j1/updates", headers=api.tokens["alice"]).json()["updates"]
    assert (listed["update_id"], listed["state"], listed["instances_total"]) == (
        sent["update_id"], "ROLLING_FORWARD", 2)
    one = f"/v1/updates/{sent['update_id']}"
    assert api.get(one, headers=api.tokens["alice"]).json()["remaining"] == [0, 1]
    assert api.get(one, headers=api.tokens["bob"]).status_code == 403
    assert api.get("/v1/jobs/j1/updates", headers=api.tokens["bob"]).status_code == 403
    refused = api.post(f"{one}/pause", headers=api.tokens["bob"])
    assert refused.status_code == 403 and refused.json()["detail"].startswith(f"update.pause on {sent['update_id']} "
                                                                              "refused: bob is in none of team-a")
    paused = api.post(f"{one}/pause", headers=api.tokens["alice"]).json()
    [(_t, _k, _s, command)] = api.out.take("job-commands")
    assert (command["kind"], command["update_id"], paused["action"]) == ("PAUSE", sent["update_id"], "PAUSE")
    assert api.post(f"{one}/resume", headers=api.tokens["alice"]).json()["detail"] == \
        f"update {sent['update_id']} is ROLLING_FORWARD, not paused: nothing to resume"
    assert api.post(f"{one}/frob", headers=api.tokens["alice"]).status_code == 404
    assert api.get("/v1/updates/nope", headers=api.tokens["alice"]).status_code == 404
    assert ("bob", "update.pause", sent["update_id"], False) in decisions(api)
    # Config versions: the current one, and a version the job never had.
    assert api.get("/v1/jobs/j1", params={"version": 1}, headers=api.tokens["alice"]).json()["config_version"] == 1
    missing = api.get("/v1/jobs/j1", params={"version": 7}, headers=api.tokens["alice"])
    assert missing.status_code == 404 and "has no config version 7" in missing.json()["detail"]


def test_dead_letters_and_the_cluster_are_for_administrators_and_lag_for_any_user(api) -> None:
    for method, path in (("get", "/v1/dead-letters"), ("get", "/v1/dead-letters/0"),
                         ("post", "/v1/dead-letters/0/replay"), ("get", "/v1/cluster/instances")):
        refused = api.request(method, path, headers=api.tokens["alice"])
        assert refused.status_code == 403 and "is for administrators, and alice" in refused.json()["detail"], path
    # An admin is let through, and told why there is nothing to list here (no ZooKeeper): 503.
    away = api.get("/v1/cluster/instances", headers=api.tokens["root"])
    assert away.status_code == 503 and "PELOTON_ZOOKEEPER" in away.json()["detail"]
    # Anyone may read lag; a name that is no stage is refused before the broker is asked.
    unknown = api.get("/v1/lag", params={"stage": "nope"}, headers=api.tokens["bob"])
    assert unknown.status_code == 400 and "not a stage group" in unknown.json()["detail"]
    assert api.get("/v1/lag", params={"window": 61}, headers=api.tokens["bob"]).status_code == 422
    trail = decisions(api)
    assert ("alice", "dead_letter.replay", "dead-letter 0", False) in trail
    assert ("bob", "lag.read", "groups", True) in trail


def test_a_replay_through_the_api_sends_job_commands_only() -> None:
    from pelotonctl.admin import UserError
    from pelotonctl.api.operations import REPLAYABLE
    from pelotonctl.deadletters import replay

    letter = {"number": 7, "source_topic": "peloton.agent-commands", "partition": 0, "key": b"h0", "value": b"x"}
    with pytest.raises(UserError, match="only launch may write: this sender replays letters of "
                                        "job-commands only"):
        replay(Settings(), letter, writable=REPLAYABLE)


def test_pelotons_query_forms_are_the_apis_query_parameters(api) -> None:
    from tests.builders.queries import seed

    seed(api.store)
    alice, bob, root = api.tokens["alice"], api.tokens["bob"], api.tokens["root"]
    jobs = api.get("/v1/jobs", params={"state": "pending,JOB_STATE_SUCCEEDED", "keyword": "NIGHTLY", "sort": "name",
                                       "order": "ASC"}, headers=alice).json()
    assert [j["job_id"] for j in jobs["jobs"]] == ["backup", "etl"]
    first = api.get("/v1/jobs", params={"limit": 1, "total": 2}, headers=root).json()
    second = api.get("/v1/jobs", params={"limit": 1, "total": 2, "offset": 1}, headers=root).json()
    assert ([j["job_id"] for j in first["jobs"] + second["jobs"]], first["next_offset"], second["next_offset"]) == (
        ["backup", "web"], 1, None)  # the total bounds the pages
    tasks = api.get("/v1/jobs/etl/tasks", params={"state": "RUNNING,FAILED", "limit": 1}, headers=alice).json()
    assert (tasks["total"], [(t["instance"], t["name"]) for t in tasks["tasks"]]) == (2, [(1, "worker")])
    assert api.get("/v1/hosts", params={"state": "HOST_STATE_UP"}, headers=bob).json()["hosts"][0]["host_id"] == "h0"
    assert api.get("/v1/hosts", params={"state": "DRAINED"}, headers=bob).json() == {"hosts": []}
    for path, params, says in (("/v1/jobs", {"state": "RUNING"}, "state RUNING: job states are"),
                               ("/v1/jobs", {"sort": "start_time"}, "jobs here keep no start time"),
                               ("/v1/jobs/etl/tasks", {"order": "UP"}, "ASC or DESC"),
                               ("/v1/hosts", {"state": "HOST_STATE_INVALID"}, "HOST_STATE_INVALID"),
                               ("/v1/resmgr/pending", {"pool": "a1b2"}, "named by their path")):
        answer = api.get(path, params=params, headers=alice)
        assert answer.status_code == 400 and says in answer.json()["detail"], (path, answer.text)


def test_the_resource_managers_view_shows_each_caller_the_pools_they_may_read(api) -> None:
    from tests.builders.queries import seed

    seed(api.store)
    alice, bob = api.tokens["alice"], api.tokens["bob"]
    active = api.get("/v1/resmgr/tasks", headers=alice).json()["tasks"]
    assert {t["task_id"] for t in active} == {"etl-0-7", "etl-1-1", "backup-0-1", "backup-1-1", "backup-2-1"}
    assert api.get("/v1/resmgr/tasks", headers=bob).json() == {"tasks": []}  # skipped, not refused
    running = api.get("/v1/resmgr/tasks", params={"job": "etl", "state": "RUNNING"}, headers=alice).json()["tasks"]
    assert [(t["task_id"], t["resmgr"], t["host"]) for t in running] == [("etl-1-1", "admitted", "h1")]
    pending = api.get("/v1/resmgr/pending", params={"pool": "/a/x", "limit": 5}, headers=alice).json()["gangs"]
    assert [(g["position"], g["gang_id"], g["kind"]) for g in pending] == [(1, "backup-2-1", "controller"),
                                                                           (2, "backup-0-1", "non-preemptible")]
    refused = api.get("/v1/resmgr/pending", params={"pool": "/a"}, headers=bob)
    assert refused.status_code == 403 and refused.json()["detail"].startswith("job.read on /a refused")
    assert api.get("/v1/resmgr/tasks", params={"job": "etl"}, headers=bob).status_code == 403
    assert api.get("/v1/resmgr/pending", params={"pool": "/zzz"}, headers=alice).status_code == 404
    assert api.get("/v1/resmgr/tasks").status_code == 401
    assert ("bob", "job.read", "/a", False) in decisions(api)
