"""The storage gateway contract, run against every backend this machine can reach."""

from __future__ import annotations

import pytest

from peloton.store import Allocation, JobRow, Launch, TaskRow, open_store


@pytest.fixture(params=["sqlite"])
def store(request, tmp_path):
    s = open_store(tmp_path / "peloton.db")
    yield s
    s.close()


def job(job_id: str) -> JobRow:
    return JobRow(job_id, "n", "/p", "BATCH", "PENDING", 2, 0, True, "PACK_HOST", "me", "cfg", 1, 1)


def task(job_id: str, i: int, state: str = "PENDING") -> TaskRow:
    return TaskRow(job_id, i, 1, f"{job_id}-{i}-1", "/p", f"{job_id}-0-1", state, {"task_id": f"{job_id}-{i}-1"})


def test_create_jobs_is_idempotent(store) -> None:
    assert store.create_jobs([job("a")], [task("a", 0), task("a", 1)]) == {"a"}
    assert store.create_jobs([job("a"), job("b")], [task("a", 0), task("b", 0)]) == {"b"}
    assert len(store.tasks_of_job("a")) == 2
    assert store.task_state_counts(["a", "b"]) == {"a": {"PENDING": 2}, "b": {"PENDING": 1}}


def test_pending_task_ids_only_for_current_pending_runs(store) -> None:
    store.create_jobs([job("a")], [task("a", 0), task("a", 1, "RUNNING")])
    assert store.pending_task_ids(["a-0-1", "a-1-1", "zzz"]) == {"a-0-1"}


def test_claim_launches_once(store) -> None:
    row = Launch("t-0-1", "t", 0, 1, "h", 1, 1, 1, 0, 5)
    assert store.claim_launches([row]) == {"t-0-1"}
    assert store.claim_launches([row]) == set()
    assert [x.task_id for x in store.active_launches(["h"])] == ["t-0-1"]
    store.end_launches(["t-0-1"], 9)
    assert store.active_launches(["h"]) == []
    assert store.launch_counts("t") == {0: 1}


def test_allocations_add_and_remove(store) -> None:
    store.add_allocations([Allocation("x", "/p", "g", 1, 2, 3, 0, 1), Allocation("y", "/p", "g", 1, 2, 3, 0, 1)])
    store.remove_allocations(["x", "nope"])
    assert [a.task_id for a in store.allocations()] == ["y"]


def test_a_failed_transaction_leaves_nothing(store) -> None:
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.create_jobs([job("a")], [task("a", 0)])
            raise RuntimeError("boom")
    assert store.get_job("a") is None
