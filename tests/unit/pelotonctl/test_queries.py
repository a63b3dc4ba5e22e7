

from __future__ import annotations

import pytest

from peloton.store import open_store
from pelotonctl import queries
from pelotonctl.admin import NotFound, UserError
from pelotonctl.queries import JobQuery, TaskQuery
from tests.builders.queries import DAY, seed


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path / "peloton.db")
    seed(s)
    yield s
    s.close()


def ids(rows) -> list[str]:
    return [getattr(r, "job_id", None) or r["job_id"] for r in rows]


def test_pelotons_words_are_read_as_its_cli_reads_them_and_ours_beside_them() -> None:
    assert queries.words(["RUNNING,pending", " KILLED ", ""]) == ["RUNNING", "pending", "KILLED"]
    assert queries.job_states(["running", "JOB_STATE_PENDING", "RUNNING"]) == ["RUNNING", "PENDING"]
    assert queries.task_states(["POD_STATE_RUNNING", "lost"]) == ["RUNNING", "LOST"]
    assert queries.host_states(["HOST_STATE_DRAINING", "down"]) == ["DRAINING", "DOWN"]
    assert queries.sort_order("asc") is False and queries.sort_order("DESC") is True
    assert queries.labels_of(["tier=1", "team=a=b"]) == (("tier", "1"), ("team", "a=b"))


@pytest.mark.parametrize("call, says", [
    (lambda: queries.job_states(["RUNING"]), "state RUNING: job states are INITIALIZED, PENDING"),
    (lambda: queries.job_states(["JOB_STATE_UNKNOWN"]), "no job here is in Peloton's UNKNOWN state"),
    (lambda: queries.task_states(["RESERVED"]), "no task here is RESERVED: hosts are not reserved"),
    (lambda: queries.host_states(["HOST_STATE_INVALID"]), "no host here is in Peloton's HOST_STATE_INVALID"),
    (lambda: queries.host_states(["MAINTENANCE"]), "host states are UP, DRAINING, DRAINED, DOWN"),
    (lambda: queries.sort_order("UP"), "sort order 'UP': ASC or DESC"),
    (lambda: queries.labels_of(["tier"]), "label 'tier': expected KEY=VALUE"),
    (lambda: JobQuery(sort=("start_time",)), "jobs here keep no start time"),
    (lambda: JobQuery(sort=("size",)), "sort size: jobs sort by creation_time, completion_time"),
    (lambda: JobQuery(limit=0), "limit 0: at least 1"),
    (lambda: TaskQuery(sort=("cpu",)), "sort cpu: tasks sort by creation_time, host, instance_id"),
])
def test_a_word_that_means_nothing_here_is_refused_with_the_reason(call, says) -> None:
    with pytest.raises(UserError, match=None) as raised:
        call()
    assert says in str(raised.value)


def test_keywords_must_each_occur_in_the_jobs_config_in_any_case_as_in_peloton(store) -> None:
    assert ids(queries.query_jobs(store, JobQuery(keywords=("NIGHTLY",)))) == ["backup", "etl"]  # description
    assert ids(queries.query_jobs(store, JobQuery(keywords=("nightly", "data", "etl")))) == ["etl"]  # all of them
    assert ids(queries.query_jobs(store, JobQuery(keywords=("front",)))) == ["web"]  # owner
    assert ids(queries.query_jobs(store, JobQuery(keywords=("hello",)))) == ["backup", "web", "etl"]  # command
    # Values, not keys; and not the per-instance configs (Peloton's index leaves them out too).
    assert queries.query_jobs(store, JobQuery(keywords=("owningteam",))) == []
    assert queries.query_jobs(store, JobQuery(keywords=("secretword",))) == []


def test_jobs_are_filtered_by_labels_time_and_the_stores_own_filters(store) -> None:
    assert ids(queries.query_jobs(store, JobQuery(labels=(("tier", "2"),)))) == ["backup", "web"]
    assert ids(queries.query_jobs(store, JobQuery(created_since_ms=2 * DAY))) == ["backup", "web"]
    assert ids(queries.query_jobs(store, JobQuery(states=("PENDING",), owner="data"))) == ["etl"]
    assert ids(queries.query_jobs(store, JobQuery(), readable=lambda pool: pool != "/b")) == ["backup", "etl"]


def test_jobs_sort_on_pelotons_properties_and_page_within_its_total(store) -> None:
    assert ids(queries.query_jobs(store, JobQuery(descending=False))) == ["etl", "web", "backup"]
    assert ids(queries.query_jobs(store, JobQuery(sort=("name",), descending=False))) == ["backup", "etl", "web"]
    assert ids(queries.query_jobs(store, JobQuery(sort=("owner", "name")))) == ["web", "etl", "backup"]
    # A job not completed has no completion time: last, in either order.
    for descending in (True, False):
        assert ids(queries.query_jobs(store, JobQuery(sort=("completion_time",), descending=descending)))[0] == "backup"
    assert ids(queries.query_jobs(store, JobQuery(offset=1, limit=1))) == ["web"]
    assert ids(queries.query_jobs(store, JobQuery(offset=1, total=2))) == ["web"]  # the total bounds the pages
    assert queries.query_jobs(store, JobQuery(offset=2, total=2)) == []


def test_a_sort_that_would_see_only_part_of_the_matching_jobs_is_refused(store, monkeypatch) -> None:
    monkeypatch.setattr(queries, "SORT_WINDOW", 2)
    with pytest.raises(UserError, match="more than the 2 newest jobs match"):
        queries.query_jobs(store, JobQuery(sort=("name",), limit=1))
    assert ids(queries.query_jobs(store, JobQuery(sort=("name",), states=("PENDING",), limit=1))) == ["web"]


def test_a_jobs_tasks_are_queried_by_state_name_and_host_sorted_and_paged(store) -> None:
    etl = store.get_job("etl")

    def instances(**query) -> tuple[list[int], int]:
        rows, total = queries.query_tasks(store, etl, TaskQuery(**query))
        return [r["instance"] for r in rows], total
    assert instances() == ([0, 1, 2], 3)
    assert instances(states=("RUNNING", "FAILED")) == ([1, 2], 2)
    assert instances(names=("special",)) == ([2], 1)
    assert instances(hosts=("h1", "h9")) == ([1], 1)
    assert instances(sort=("state",), descending=True) == ([2, 1, 0], 3)  # a run's life order, not the alphabet
    assert instances(sort=("host",), descending=True) == ([2, 1, 0], 3)
    assert instances(sort=("creation_time",)) == ([1, 0, 2], 3)  # only 1 started RUNNING: the rest after it
    assert instances(sort=("name", "instanceId"), descending=True) == ([1, 0, 2], 3)
    assert instances(offset=1, limit=1) == ([1], 3)
    rows, _ = queries.query_tasks(store, etl, TaskQuery(limit=None))
    assert [r["name"] for r in rows] == ["worker", "worker", "special"]


def test_the_resource_managers_tasks_are_its_queued_and_admitted_runs_with_the_job_managers_state(store) -> None:
    rows = queries.resmgr_tasks(store)
    assert [(r["task_id"], r["resmgr"], r["state"]) for r in rows] == [
        ("etl-0-7", "admitted", None),  # a run the job manager has left behind
        ("etl-1-1", "admitted", "RUNNING"),
        ("backup-0-1", "queued", "PENDING"), ("backup-1-1", "queued", "PENDING"), ("backup-2-1", "queued", "PENDING")]
    assert rows[1]["host"] == "h1" and rows[1]["since_ms"] == DAY + 10
    assert [r["task_id"] for r in queries.resmgr_tasks(store, states=["RUNNING"])] == ["etl-1-1"]
    assert [r["task_id"] for r in queries.resmgr_tasks(store, pool="/a/x")] == ["backup-0-1", "backup-1-1",
                                                                               "backup-2-1"]
    assert [r["task_id"] for r in queries.resmgr_tasks(store, job_id="etl")] == ["etl-0-7", "etl-1-1"]
    assert queries.resmgr_tasks(store, job_id="etl", pool="/b") == []
    assert queries.resmgr_tasks(store, readable=lambda pool: pool == "/b") == []
    with pytest.raises(NotFound, match="no job nope"):
        queries.resmgr_tasks(store, job_id="nope")


def test_pending_gangs_come_in_admission_order_a_limit_a_pool(store) -> None:
    rows = queries.pending_gangs(store, "/a")
    assert [(r["pool"], r["position"], r["gang_id"], r["priority"], r["tasks"], r["kind"]) for r in rows] == [
        ("/a/x", 1, "backup-2-1", 5, 1, "controller"), ("/a/x", 2, "backup-0-1", 0, 2, "non-preemptible")]
    assert rows[1]["demand"]["cpu"] == 1.0 and rows[1]["task_ids"] == ["backup-0-1", "backup-1-1"]
    assert rows[0]["not_before_ms"] == 9 and rows[1]["not_before_ms"] is None
    assert [r["gang_id"] for r in queries.pending_gangs(store, limit=1)] == ["backup-2-1"]
    assert queries.pending_gangs(store, "/b") == []
    with pytest.raises(UserError, match="pools here are named by their path"):
        queries.pending_gangs(store, "a1b2c3")  # a Peloton pool id
    with pytest.raises(NotFound, match="no resource pool '/zzz'"):
        queries.pending_gangs(store, "/zzz")
