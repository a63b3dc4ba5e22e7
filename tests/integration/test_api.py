"""The API as teams meet it: a real `pelotonctl api` process in front of a real pipeline. Alice
(team-a) runs a job in her team's pool; she is refused in bob's pool, and bob cannot stop her
job; the audit topic holds every decision."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from peloton.auth.grants import new_key_pair
from pelotonctl.admin import create_pool
from pelotonctl.dev.stack import free_port, start_api, wait_for_port

pytestmark = pytest.mark.integration

RESOURCES = """resources:
- {kind: cpu, reservation: 4, limit: 4, share: 1}
- {kind: memory, reservation: 4096, limit: 4096, share: 1}
- {kind: disk, reservation: 10000, limit: 10000, share: 1}
- {kind: gpu, reservation: 0, limit: 0, share: 1}
"""
JOB = """name: hello
instanceCount: 2
defaultConfig:
  resource: {cpuLimit: 0.5, memLimitMb: 64, diskLimitMb: 10}
  command: {value: "sleep 0.5"}
"""


def call(url: str, method: str = "GET", token: str | None = None, body: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def serve_api(p, command_token: str = "") -> str:
    """Start an API process beside the pipeline's stages (signing its commands with
    `command_token`); its address."""
    port = free_port()
    p.procs["api-0"] = start_api(p.settings, p.log("api-0"), port,
                                 extra_env={**p.as_user("api"), "PELOTON_COMMAND_TOKEN": command_token})
    wait_for_port("127.0.0.1", port, 60)
    return f"http://127.0.0.1:{port}"


@pytest.mark.long
def test_teams_act_in_their_own_pools_only_and_every_decision_is_audited(pipeline_factory) -> None:
    p = pipeline_factory()
    create_pool(p.settings, p.store, "/a", "name: a\nowningTeam: team-a\n" + RESOURCES)
    create_pool(p.settings, p.store, "/b", "name: b\nowningTeam: team-b\n" + RESOURCES)
    p.start_all()
    api = serve_api(p)
    tokens = {}
    for user, group in (("alice", "team-a"), ("bob", "team-b")):
        issued = p.ctl("auth", "issue", "--user", user, "--group", group)
        assert issued.returncode == 0, issued.stderr
        tokens[user] = issued.stdout.strip()

    assert call(f"{api}/v1/jobs")[0] == 401
    status, made = call(f"{api}/v1/jobs?wait=true", "POST", tokens["alice"], {"pool": "/a", "config": JOB})
    assert status == 201 and made["state"], made
    job_id = made["job_id"]
    status, refused = call(f"{api}/v1/jobs", "POST", tokens["alice"], {"pool": "/b", "config": JOB})
    assert status == 403 and "alice is in none of team-b" in refused["detail"]
    status, refused = call(f"{api}/v1/jobs/{job_id}/stop", "POST", tokens["bob"], {})
    assert status == 403 and "bob is in none of team-a" in refused["detail"]
    assert p.wait_job(job_id) == "SUCCEEDED"
    status, job = call(f"{api}/v1/jobs/{job_id}", token=tokens["alice"])
    assert status == 200 and job["runtime"]["state"] == "SUCCEEDED" and job["pool"] == "/a"
    assert [j["pool"] for j in call(f"{api}/v1/jobs", token=tokens["alice"])[1]["jobs"]] == ["/a"]  # nothing from /b

    audit = p.read_topic("audit", expect=6)
    decisions = [(e["user"], e["action"], e["pool"], e["allowed"]) for e in audit]
    assert decisions[:4] == [("", "job.read", "", False), ("alice", "job.create", "/a", True),
                             ("alice", "job.create", "/b", False), ("bob", "job.stop", "/a", False)], decisions
    assert all(e["reason"] for e in audit)


def events(url: str, token: str, last_event_id: str | None = None) -> list[tuple[str, dict]]:
    """(id, event) of a stream read to its end (follow=false)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}",
                                                   **({"Last-Event-ID": last_event_id} if last_event_id else {})})
    found, event_id = [], None
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert answer.headers["Content-Type"].startswith("text/event-stream")
        for raw in answer:
            line = raw.decode().rstrip("\n")
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                found.append((event_id, json.loads(line[6:])))
    return found


def test_a_jobs_task_events_stream_from_its_creation_and_resume_where_the_client_left(pipeline_factory) -> None:
    p = pipeline_factory()
    create_pool(p.settings, p.store, "/a", "name: a\nowningTeam: team-a\n" + RESOURCES)
    p.start_all()
    api = serve_api(p)
    alice = p.ctl("auth", "issue", "--user", "alice", "--group", "team-a").stdout.strip()
    bob = p.ctl("auth", "issue", "--user", "bob", "--group", "team-b").stdout.strip()
    status, made = call(f"{api}/v1/jobs?wait=true", "POST", alice, {"pool": "/a", "config": JOB})
    assert status == 201, made
    job_id = made["job_id"]
    assert p.wait_job(job_id) == "SUCCEEDED"

    seen = events(f"{api}/v1/jobs/{job_id}/events?follow=false", alice)
    runs = {(e["instance"], e["state"]) for _id, e in seen}
    assert {(0, "RUNNING"), (0, "SUCCEEDED"), (1, "RUNNING"), (1, "SUCCEEDED")} <= runs, seen
    assert {(0, "LAUNCHING"), (1, "LAUNCHING")} <= runs  # the steps before launch too
    assert all(e["job_id"] == job_id for _id, e in seen)
    # From the middle: exactly what came after that event, nothing twice.
    middle = len(seen) // 2
    assert events(f"{api}/v1/jobs/{job_id}/events?follow=false", alice, seen[middle - 1][0]) == seen[middle:]
    assert events(f"{api}/v1/jobs/{job_id}/events?follow=false", alice, seen[-1][0]) == []
    assert call(f"{api}/v1/jobs/{job_id}/events", token=bob)[0] == 403
    # A pool's stream: from a time on, every job of the pool.
    pool = events(f"{api}/v1/events?pool=/a&follow=false&since_ms=0", alice)
    assert [e for _id, e in pool] == [e for _id, e in seen]
    # From a time after every record: the partitions that had events start at their ends, and the
    # stream ends at once (it waited for ever, read to offset 0 where nothing was fetched).
    later = int(time.time() * 1000) + 1000
    started = time.monotonic()
    assert events(f"{api}/v1/events?pool=/a&follow=false&since_ms={later}", alice) == []
    assert time.monotonic() - started < 15


def test_a_command_the_job_manager_refuses_is_the_callers_error_with_its_reason(pipeline_factory) -> None:
    # The API signs with a service token whose user owns nothing: it lets alice create in /a, and
    # the job manager, checking the signer, refuses. She hears why, not "submitted".
    p = pipeline_factory(signed_commands=True)
    create_pool(p.settings, p.store, "/a", "name: a\nowningTeam: team-a\n" + RESOURCES)
    p.start_all()
    bot = p.ctl("auth", "issue", "--user", "api-bot", "--group", "ops").stdout.strip()
    api = serve_api(p, command_token=bot)
    alice = p.ctl("auth", "issue", "--user", "alice", "--group", "team-a").stdout.strip()
    (p.home / "hello.yaml").write_text(JOB)
    as_alice = {"PELOTON_API_URL": api, "PELOTON_TOKEN": alice}
    made = p.ctl("job", "create", "/a", str(p.home / "hello.yaml"), extra_env=as_alice)
    assert made.returncode == 2, (made.stdout, made.stderr)
    assert "refused by the job manager: command refused: job.create on /a: api-bot is in none of team-a" in made.stderr
    status, answer = call(f"{api}/v1/jobs?wait=true", "POST", alice, {"pool": "/a", "config": JOB})
    assert status == 400 and "api-bot is in none of team-a" in answer["detail"]
    [letter, _] = p.read_topic("dead-letters", expect=2)
    assert "api-bot is in none of team-a" in letter["reason"]
    assert call(f"{api}/v1/jobs", token=alice)[1]["jobs"] == []  # nothing was made


def test_a_command_answers_once_the_job_manager_acted_so_the_next_one_finds_its_effect(pipeline_factory) -> None:
    p = pipeline_factory(signed_commands=True)
    create_pool(p.settings, p.store, "/a", "name: a\nowningTeam: team-a\n" + RESOURCES)
    p.start_all()
    service = p.ctl("auth", "issue", "--user", "api", "--admin").stdout.strip()
    api = serve_api(p, command_token=service)
    alice = p.ctl("auth", "issue", "--user", "alice", "--group", "team-a").stdout.strip()
    (p.home / "sleep.yaml").write_text(JOB.replace("sleep 0.5", "sleep 60"))
    as_alice = {"PELOTON_API_URL": api, "PELOTON_TOKEN": alice}
    made = p.ctl("job", "create", "/a", str(p.home / "sleep.yaml"), extra_env=as_alice).stdout
    assert made.startswith("Job ") and made.endswith(" created\n"), made  # Peloton's words
    job_id = made.split()[1]
    stop = p.ctl("job", "stop", job_id, "--instances", "0", "--wait", extra_env=as_alice)  # at once: it is stored
    assert stop.returncode == 0, stop.stderr
    status, answer = call(f"{api}/v1/jobs/{job_id}/stop?wait=true", "POST", alice, {})
    assert status == 200 and answer["outcome"] == "applied", answer
    status, outcome = call(f"{api}/v1/jobs/{job_id}/commands/{answer['command_id']}", token=alice)
    assert status == 200 and outcome["state"] == "applied", outcome


def test_task_logs_come_through_the_api_from_the_agent_that_ran_the_task(pipeline_factory, tmp_path) -> None:
    # The agent serves its sandboxes to the API alone; pelotonctl, on a "machine" without them
    # (another home), reads a run's output through the API as a reader of the job's pool.
    p = pipeline_factory(hosts="agent:1:cpu=2,mem_mb=1024,disk_mb=1000")
    create_pool(p.settings, p.store, "/a", "name: a\nowningTeam: team-a\n" + RESOURCES)
    signing, checking = new_key_pair()  # the API signs a grant per run; the agent checks it
    for stage in ("admit", "entitle", "place", "launch"):
        p.start(stage, wait=False)
    p.start_agent("agent-0", extra_env={"PELOTON_AGENT_LOGS_PUBLIC_KEY": checking})
    port = free_port()
    p.procs["api-0"] = start_api(p.settings, p.log("api-0"), port,
                                 extra_env={**p.as_user("api"), "PELOTON_AGENT_LOGS_KEY": signing})
    wait_for_port("127.0.0.1", port, 60)
    api = f"http://127.0.0.1:{port}"
    alice = p.ctl("auth", "issue", "--user", "alice", "--group", "team-a").stdout.strip()
    bob = p.ctl("auth", "issue", "--user", "bob", "--group", "team-b").stdout.strip()
    job_text = JOB.replace("sleep 0.5", "echo hello from $PELOTON_INSTANCE_ID; echo oops >&2")
    status, made = call(f"{api}/v1/jobs?wait=true", "POST", alice, {"pool": "/a", "config": job_text})
    assert status == 201, made
    assert p.wait_job(made["job_id"]) == "SUCCEEDED"
    elsewhere = {"PELOTON_HOME": str(tmp_path / "elsewhere"), "PELOTON_API_URL": api, "PELOTON_TOKEN": alice}
    out = p.ctl("task", "logs", made["job_id"], "1", extra_env=elsewhere)
    assert out.returncode == 0 and out.stdout == "hello from 1\n", (out.stdout, out.stderr)
    err = p.ctl("task", "logs", made["job_id"], "0", "--stderr", extra_env=elsewhere)
    assert err.returncode == 0 and err.stdout == "oops\n", err.stderr
    refused = p.ctl("task", "logs", made["job_id"], "0", extra_env={**elsewhere, "PELOTON_TOKEN": bob})
    assert refused.returncode == 6 and "bob is in none of team-a" in refused.stderr
    missing = p.ctl("task", "logs", made["job_id"], "0", "--run", "5", extra_env=elsewhere)
    assert missing.returncode == 3 and "has runs 1-1" in missing.stderr
