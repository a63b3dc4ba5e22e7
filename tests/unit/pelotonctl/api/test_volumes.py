"""The API's persistent volumes: reading one is reading its job, deleting one is job.delete on the
job's pool, the volumes of a job that is gone are for administrators, every decision audited;
and a job's deletion takes its volumes unless keep_volumes. Commands and audit records are
recorded (no broker)."""

from __future__ import annotations

import dataclasses

import pytest
from fastapi.testclient import TestClient

from peloton.auth.tokens import issue
from peloton.config import Settings
from peloton.model.jobconfig import parse_job_config
from peloton.model.pool import parse_pool_config
from peloton.model.volumes import VolumeSpec, mount_record, volume_row
from peloton.runtime import RecordingEmitter, StaticView
from peloton.store import open_store
from pelotonctl.api.app import make_app
from pelotonctl.api.audit import Audit
from stages.admit.expand import expand_job
from tests.builders.api import HOST, JOB, RESOURCES


def add_volume(store, job_id: str, instance: int, host: str = "h0") -> None:
    store.add_volumes([volume_row(mount_record(job_id, instance, VolumeSpec("data", 64), host), job_id, instance,
                                  1000)])


@pytest.fixture
def api(tmp_path):
    store = open_store(tmp_path / "peloton.db")
    store.put_pool("/a", parse_pool_config("name: a\nowningTeam: team-a\n" + RESOURCES, "/a"))
    store.put_pool("/b", parse_pool_config("name: b\nowningTeam: team-b\n" + RESOURCES, "/b"))
    for job_id, pool in (("j1", "/a"), ("j2", "/b")):
        job, tasks = expand_job(job_id, pool, parse_job_config(JOB), JOB, 1)
        store.create_jobs([job], tasks)
    add_volume(store, "j1", 0, "h0")
    add_volume(store, "j1", 1, "h1")
    add_volume(store, "j2", 0, "h0")
    add_volume(store, "gone", 0, "h2")  # kept when its job was deleted
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


def end_job(store, job_id: str) -> None:
    store.update_jobs([dataclasses.replace(store.get_job(job_id), state="KILLED")])


def test_a_jobs_owners_read_its_volumes_and_others_are_refused_with_the_reason(api) -> None:
    listed = api.get("/v1/volumes", params={"job": "j1"}, headers=api.tokens["alice"])
    assert listed.status_code == 200, listed.text
    assert [(v["volume_id"], v["instance"], v["host_id"], v["state"]) for v in listed.json()["volumes"]] == [
        ("j1-0", 0, "h0", "CREATED"), ("j1-1", 1, "h1", "CREATED")]
    one = api.get("/v1/volumes/j1-1", headers=api.tokens["alice"]).json()
    assert (one["job_id"], one["container_path"], one["size_mb"], one["created_ms"]) == ("j1", "data", 64, 1000)
    refused = api.get("/v1/volumes/j1-1", headers=api.tokens["bob"])
    assert refused.status_code == 403
    assert refused.json()["detail"] == "job.read on j1-1 refused: bob is in none of team-a, the groups that own /a"
    assert api.get("/v1/volumes", params={"job": "j1"}, headers=api.tokens["bob"]).status_code == 403
    assert decisions(api) == [("alice", "job.read", "j1", True), ("alice", "job.read", "j1-1", True),
                              ("bob", "job.read", "j1-1", False), ("bob", "job.read", "j1", False)]
    missing = api.get("/v1/volumes/j1-7", headers=api.tokens["alice"])
    assert missing.status_code == 404 and missing.json()["detail"].startswith("no volume 'j1-7'")
    assert api.get("/v1/volumes", params={"job": "nope"}, headers=api.tokens["alice"]).status_code == 404
    assert api.get("/v1/volumes", params={"job": "j1"}).status_code == 401


def test_every_volume_lists_those_the_caller_may_read(api) -> None:
    def ids(user: str) -> list[str]:
        return [v["volume_id"] for v in api.get("/v1/volumes", headers=api.tokens[user]).json()["volumes"]]

    assert ids("alice") == ["j1-0", "j1-1"]
    assert ids("bob") == ["j2-0"]
    assert ids("root") == ["gone-0", "j1-0", "j1-1", "j2-0"]


def test_the_volumes_of_a_job_that_is_gone_are_for_administrators(api) -> None:
    refused = api.get("/v1/volumes/gone-0", headers=api.tokens["alice"])
    assert refused.status_code == 403
    assert refused.json()["detail"] == ("job.read on gone-0 refused: job gone is gone: only administrators act on "
                                        "the volumes of a deleted job")
    assert api.get("/v1/volumes", params={"job": "gone"}, headers=api.tokens["root"]).json()["volumes"][0][
        "host_id"] == "h2"
    assert api.delete("/v1/volumes/gone-0", headers=api.tokens["alice"]).status_code == 403
    assert api.out.take("placements") == []
    deleted = api.delete("/v1/volumes/gone-0", headers=api.tokens["root"])
    assert deleted.status_code == 200 and deleted.json()["state"] == "DELETED"
    assert [(key, v["volume_id"], v["requested_by"]) for _t, key, _s, v in api.out.take("placements")] == [
        ("h2", "gone-0", "root")]
    assert ("alice", "job.delete", "gone-0", False) in decisions(api)


def test_a_volume_is_deleted_by_its_jobs_owners_once_the_job_has_ended(api) -> None:
    early = api.delete("/v1/volumes/j1-0", headers=api.tokens["alice"])
    assert early.status_code == 400 and "which is PENDING: the instance may run, or run again" in early.json()[
        "detail"]
    end_job(api.store, "j1")
    refused = api.delete("/v1/volumes/j1-0", headers=api.tokens["bob"])
    assert refused.status_code == 403 and refused.json()["detail"].startswith("job.delete on j1-0 refused")
    assert api.out.take("placements") == []
    deleted = api.delete("/v1/volumes/j1-0", headers=api.tokens["alice"])
    assert deleted.status_code == 200, deleted.text
    assert (deleted.json()["state"], deleted.json()["already_deleted"]) == ("DELETED", False)
    [(_t, key, schema, request)] = api.out.take("placements")
    assert (key, schema, request["volume_id"], request["requested_by"]) == ("h0", "peloton.VolumeDelete", "j1-0",
                                                                            "alice")
    again = api.delete("/v1/volumes/j1-0", headers=api.tokens["alice"]).json()
    assert again["already_deleted"] and api.out.take("placements") == []
    assert api.store.get_volume("j1-0")["state"] == "DELETED"
    assert api.delete("/v1/volumes/j1-9", headers=api.tokens["alice"]).status_code == 404


def test_a_jobs_deletion_deletes_its_volumes_unless_kept(api) -> None:
    end_job(api.store, "j1")
    end_job(api.store, "j2")
    kept = api.delete("/v1/jobs/j2", params={"keep_volumes": "true"}, headers=api.tokens["bob"])
    assert kept.status_code == 200, kept.text
    assert (kept.json()["volumes_deleted"], kept.json()["volumes_kept"]) == ([], ["j2-0"])
    assert [c["kind"] for _t, _k, _s, c in api.out.take("job-commands")] == ["DELETE"]
    assert api.out.take("placements") == [] and api.store.get_volume("j2-0")["state"] == "CREATED"
    deleted = api.delete("/v1/jobs/j1", params={"wait": "true"}, headers=api.tokens["alice"])
    assert deleted.status_code == 200, deleted.text
    assert (deleted.json()["volumes_deleted"], deleted.json()["volumes_kept"]) == (["j1-0", "j1-1"], [])
    assert [(key, v["volume_id"]) for _t, key, _s, v in api.out.take("placements")] == [("h0", "j1-0"),
                                                                                      ("h1", "j1-1")]
    assert [c["job_id"] for _t, _k, _s, c in api.out.take("job-commands")] == ["j1"]
    # A job not ended is not deleted: nor are its volumes
    add_volume(api.store, "j3", 0)
    job, tasks = expand_job("j3", "/a", parse_job_config(JOB), JOB, 1)
    api.store.create_jobs([job], tasks)
    running = api.delete("/v1/jobs/j3", headers=api.tokens["alice"])
    assert running.status_code == 400 and "only a terminal job is deleted" in running.json()["detail"]
    assert api.out.take() == [] and api.store.get_volume("j3-0")["state"] == "CREATED"
