"""pelotonctl volume list|get|delete, and job delete [--keep-volumes], end to end through the
direct client over a SQLite store; what they send is recorded (no broker)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from peloton.model.jobconfig import parse_job_config
from peloton.model.volumes import VolumeSpec, mount_record, volume_row
from peloton.runtime import RecordingEmitter
from peloton.store import open_store
from pelotonctl.cli import app
from stages.admit.expand import expand_job
from tests.builders.api import JOB

runner = CliRunner()


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """(the environment of a command, the store, what commands send)."""
    store = open_store(tmp_path / "peloton.db")
    job, tasks = expand_job("j1", "/a", parse_job_config(JOB), JOB, 1)
    store.create_jobs([job], tasks)
    for instance, host in ((0, "h0"), (1, "h1")):
        store.add_volumes([volume_row(mount_record("j1", instance, VolumeSpec("data", 512), host), "j1", instance,
                                      1_700_000_000_000)])
    out = RecordingEmitter("pelotonctl")
    monkeypatch.setattr("pelotonctl.admin.emitter", lambda _settings, who="pelotonctl": out)
    env = {"PELOTON_HOME": str(tmp_path / "home"), "PELOTON_STORE": str(tmp_path / "peloton.db"), "USER": "carol"}
    yield env, store, out
    store.close()


def end_job(store) -> None:
    store.update_jobs([dataclasses.replace(store.get_job("j1"), state="KILLED")])


def test_volume_list_prints_pelotons_columns_or_json(cluster) -> None:
    env, _store, _out = cluster
    table = runner.invoke(app, ["volume", "list", "j1"], env=env)
    assert table.exit_code == 0, table.output
    header, first, second = table.stdout.splitlines()
    assert header.split()[:6] == ["VOLUME", "ID", "JOB", "ID", "INSTANCE", "HOSTNAME"]
    assert first.split()[:7] == ["j1-0", "j1", "0", "h0", "CREATED", "512", "data"]
    assert second.split()[:4] == ["j1-1", "j1", "1", "h1"]
    listed = runner.invoke(app, ["volume", "list", "j1", "--json"], env=env)
    assert [v["volume_id"] for v in json.loads(listed.stdout)["volumes"]] == ["j1-0", "j1-1"]
    assert len(runner.invoke(app, ["volume", "list"], env=env).stdout.splitlines()) == 3  # every volume
    missing = runner.invoke(app, ["volume", "list", "nope"], env=env)
    assert missing.exit_code == 3 and "no job nope" in missing.stderr


def test_volume_get_prints_one_or_exits_3(cluster) -> None:
    env, _store, _out = cluster
    got = runner.invoke(app, ["volume", "get", "j1-1", "--json"], env=env)
    assert got.exit_code == 0, got.output
    assert {k: json.loads(got.stdout)[k] for k in ("job_id", "instance", "host_id", "size_mb")} == {
        "job_id": "j1", "instance": 1, "host_id": "h1", "size_mb": 512}
    assert runner.invoke(app, ["volume", "get", "j1-1"], env=env).stdout.splitlines()[1].startswith("j1-1 ")
    missing = runner.invoke(app, ["volume", "get", "j1-9"], env=env)
    assert missing.exit_code == 3 and "no volume 'j1-9'" in missing.stderr


def test_volume_delete_waits_for_the_job_to_end_then_tells_the_host(cluster) -> None:
    env, store, out = cluster
    early = runner.invoke(app, ["volume", "delete", "j1-0"], env=env)
    assert early.exit_code == 2 and "which is PENDING" in early.stderr
    end_job(store)
    deleted = runner.invoke(app, ["volume", "delete", "j1-0"], env=env)
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout == "Deleted volume j1-0 (instance 0 of job j1) on host h0.\n"
    [(_t, key, _schema, request)] = out.take("placements")
    assert (key, request["volume_id"], request["requested_by"]) == ("h0", "j1-0", "carol")
    again = runner.invoke(app, ["volume", "delete", "j1-0"], env=env)
    assert again.exit_code == 0 and again.stdout.startswith("Volume j1-0 was deleted already (")
    as_json = json.loads(runner.invoke(app, ["volume", "delete", "j1-0", "--json"], env=env).stdout)
    assert (as_json["state"], as_json["already_deleted"]) == ("DELETED", True)
    assert out.take("placements") == []


def test_job_delete_takes_the_jobs_volumes_unless_kept(cluster) -> None:
    env, store, out = cluster
    end_job(store)
    kept = runner.invoke(app, ["job", "delete", "j1", "--keep-volumes", "--json"], env=env)
    assert kept.exit_code == 0, kept.output
    answer = json.loads(kept.stdout)
    assert (answer["kind"], answer["volumes_deleted"], answer["volumes_kept"]) == ("DELETE", [], ["j1-0", "j1-1"])
    assert [c["kind"] for _t, _k, _s, c in out.take("job-commands")] == ["DELETE"]
    assert out.take("placements") == []
    said = runner.invoke(app, ["job", "delete", "j1"], env=env)  # the job manager has not deleted it yet
    assert said.exit_code == 0, said.output
    assert said.stdout == "job j1: deleted, with its volumes j1-0, j1-1\n"
    assert [key for _t, key, _s, _v in out.take("placements")] == ["h0", "h1"]
    assert {v["state"] for v in store.list_volumes("j1")} == {"DELETED"}
