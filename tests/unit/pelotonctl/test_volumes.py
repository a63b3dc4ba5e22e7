"""Persistent volumes as users delete them (pelotonctl/volumes.py), over a real SQLite store: a
volume goes only once its job has ended or is gone, its host manager is told (VolumeDelete on the
placements topic, keyed by its host) before the store says DELETED, and a job's deletion takes
its volumes. What is sent is recorded (no broker)."""

from __future__ import annotations

import dataclasses

import pytest

from peloton.config import Settings
from peloton.model.jobconfig import parse_job_config
from peloton.model.volumes import VolumeSpec, mount_record, volume_row
from peloton.runtime import DeliveryError, RecordingEmitter
from peloton.store import open_store
from pelotonctl import volumes
from pelotonctl.admin import NotFound, UserError
from stages.admit.expand import expand_job
from tests.builders.api import JOB


def add_volume(store, job_id: str, instance: int, host: str = "h0", at_ms: int = 1000) -> str:
    mount = mount_record(job_id, instance, VolumeSpec("data", 64), host)
    store.add_volumes([volume_row(mount, job_id, instance, at_ms)])
    return mount["volume_id"]


def end_job(store, job_id: str, state: str = "KILLED") -> None:
    store.update_jobs([dataclasses.replace(store.get_job(job_id), state=state)])


@pytest.fixture
def store(tmp_path):
    store = open_store(tmp_path / "x.db")
    job, tasks = expand_job("j1", "/a", parse_job_config(JOB), JOB, 1)
    store.create_jobs([job], tasks)
    add_volume(store, "j1", 0, "h0")
    add_volume(store, "j1", 1, "h1")
    yield store
    store.close()


@pytest.fixture
def sent(monkeypatch) -> RecordingEmitter:
    out = RecordingEmitter("pelotonctl")
    monkeypatch.setattr("pelotonctl.admin.emitter", lambda _settings, who="pelotonctl": out)
    return out


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(home=tmp_path, store=str(tmp_path / "x.db"))


def test_a_jobs_volumes_are_listed_by_instance_and_one_is_read_by_its_id(store) -> None:
    assert [(v["volume_id"], v["host_id"], v["state"]) for v in volumes.list_volumes(store, "j1")] == [
        ("j1-0", "h0", "CREATED"), ("j1-1", "h1", "CREATED")]
    assert volumes.list_volumes(store, "nope") == []
    assert len(volumes.list_volumes(store)) == 2
    assert volumes.get_volume(store, "j1-1")["container_path"] == "data"
    with pytest.raises(NotFound, match=r"no volume 'j1-9': a volume's id is <job id>-<instance>"):
        volumes.get_volume(store, "j1-9")


def test_a_volume_of_a_job_not_ended_is_kept_with_the_reason(store, settings, sent) -> None:
    with pytest.raises(UserError) as refused:
        volumes.delete_volume(settings, store, "j1-0", "alice")
    assert not isinstance(refused.value, NotFound)
    assert str(refused.value).startswith("volume j1-0 is instance 0's of job j1, which is PENDING: the instance may "
                                         "run, or run again, on it. Stop the job (`pelotonctl job stop j1`)")
    with pytest.raises(UserError, match="which is PENDING"):
        volumes.delete_job_volumes(settings, store, "j1", "alice")
    assert sent.take() == [] and store.get_volume("j1-0")["state"] == "CREATED"


def test_a_volume_of_an_ended_job_is_deleted_and_its_host_told(store, settings, sent) -> None:
    end_job(store, "j1", "SUCCEEDED")
    done = volumes.delete_volume(settings, store, "j1-0", "alice")
    assert (done["volume_id"], done["state"], done["already_deleted"]) == ("j1-0", "DELETED", False)
    assert done["updated_ms"] > 1000
    [(topic, key, schema, request)] = sent.take()
    assert (topic, key, schema) == ("placements", "h0", "peloton.VolumeDelete")
    assert (request["volume_id"], request["host_id"], request["requested_by"]) == ("j1-0", "h0", "alice")
    assert request["request_id"] and request["sent_ms"] > 0
    assert store.get_volume("j1-0")["state"] == "DELETED" and store.get_volume("j1-1")["state"] == "CREATED"


def test_deleting_a_deleted_volume_again_sends_nothing_and_says_so(store, settings, sent) -> None:
    end_job(store, "j1")
    volumes.delete_volume(settings, store, "j1-0")
    sent.take()
    again = volumes.delete_volume(settings, store, "j1-0")
    assert (again["state"], again["already_deleted"]) == ("DELETED", True)
    assert sent.take() == []
    with pytest.raises(NotFound):
        volumes.delete_volume(settings, store, "nope-0")


def test_the_volume_of_a_job_that_is_gone_is_deleted(store, settings, sent) -> None:
    end_job(store, "j1")
    assert store.delete_job("j1", 2000)
    assert volumes.delete_volume(settings, store, "j1-1")["state"] == "DELETED"
    assert [key for _t, key, _s, _v in sent.take()] == ["h1"]


def test_a_jobs_deletion_deletes_its_created_volumes_or_keeps_them(store, settings, sent) -> None:
    end_job(store, "j1")
    assert volumes.job_deleted_volumes(settings, store, "j1", keep=True) == {
        "volumes_deleted": [], "volumes_kept": ["j1-0", "j1-1"]}
    assert sent.take() == []
    volumes.delete_volume(settings, store, "j1-0")
    sent.take()
    assert volumes.job_deleted_volumes(settings, store, "j1", keep=False, who="bob") == {
        "volumes_deleted": ["j1-1"], "volumes_kept": []}
    assert [(key, v["volume_id"], v["requested_by"]) for _t, key, _s, v in sent.take()] == [("h1", "j1-1", "bob")]
    assert volumes.delete_job_volumes(settings, store, "j1") == []  # none left: nothing sent
    assert volumes.delete_job_volumes(settings, store, "no-job") == []
    assert sent.take() == []


def test_a_delete_the_broker_did_not_take_leaves_the_volume_to_delete_again(store, settings, sent,
                                                                            monkeypatch) -> None:
    end_job(store, "j1")

    def refuse(_out, _settings) -> None:
        raise DeliveryError("broker away")

    monkeypatch.setattr("pelotonctl.admin.deliver", refuse)
    with pytest.raises(DeliveryError):
        volumes.delete_volume(settings, store, "j1-0")
    assert store.get_volume("j1-0")["state"] == "CREATED"
