"""`job create POOL FILE` (pelotonctl.admin.check_job, which the HTTP API's create goes through
too): a job file whose respoolID names another pool than the one given is refused, both named;
one that names the same pool, or none, is created there."""

from __future__ import annotations

import pytest

from peloton.config import Settings
from peloton.model.pool import parse_pool_config
from peloton.model.resources import Resources
from pelotonctl.admin import UserError, check_job
from tests.builders.api import JOB, RESOURCES, seeded_store

HOSTS = [Resources(cpu=8, mem_mb=65536, disk_mb=100000)]


@pytest.fixture
def pools(tmp_path):
    store, _token = seeded_store(tmp_path / "peloton.db", "alice", ["team-a"])
    store.put_pool("/b", parse_pool_config("name: b\nowningTeam: team-a\n" + RESOURCES, "/b"))
    yield Settings(home=tmp_path, store=str(tmp_path / "peloton.db")), store
    store.close()


def test_a_job_file_naming_another_pool_than_the_one_given_is_refused_with_both(pools) -> None:
    settings, store = pools
    with pytest.raises(UserError, match="respoolid: the job file names pool /b, but the job is created in /a"):
        check_job(settings, store, "/a", JOB + "respoolID: {value: /b}\n", "j2", HOSTS)


@pytest.mark.parametrize("named", ["", "respoolID: {value: /a}\n", "respoolID: a\n"])
def test_a_job_file_naming_the_pool_given_or_none_is_created_there(pools, named: str) -> None:
    settings, store = pools
    assert check_job(settings, store, "/a", JOB + named, "j2", HOSTS).instance_count == 2
