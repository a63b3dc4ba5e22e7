"""Admit's remembered task rows (stages/admit/owned_tasks.py) on a real SQLite store: served from
memory only while they are the store's, forgotten whenever they might not be."""

from __future__ import annotations

import dataclasses

import pytest

from peloton.store import JobRow, TaskRow, open_store
from stages.admit.owned_tasks import OwnedTasks


def job(job_id: str = "j1") -> JobRow:
    return JobRow(job_id, "n", "/p", "BATCH", "PENDING", 3, 0, True, "", "o", "", 1, 1)


def tasks(job_id: str = "j1", n: int = 3) -> list[TaskRow]:
    return [TaskRow(job_id, i, 1, f"{job_id}-{i}-1", "/p", f"g{i}", "PENDING", {"cmd": "true"}) for i in range(n)]


@pytest.fixture
def owned(tmp_path) -> OwnedTasks:
    o = OwnedTasks(open_store(str(tmp_path / "s.db")))
    o.assigned({0, 1}, {0, 1})
    with o.transaction():
        o.create_jobs([job()], tasks())
    return o


KEYS = [("j1", 0), ("j1", 1), ("j1", 2)]


def test_rows_written_are_read_back_from_memory_as_copies_without_their_spec(owned) -> None:
    rows = owned.tasks_by_instance(KEYS, spec=False)
    assert owned.reads == 0 and [rows[k].state for k in KEYS] == ["PENDING"] * 3
    assert all(r.spec is None for r in rows.values())
    rows[("j1", 0)].state = "BROKEN"  # a caller's change that was never written stays the caller's
    assert owned.tasks_by_instance([("j1", 0)], spec=False)[("j1", 0)].state == "PENDING"
    assert owned.tasks_by_instance([("j1", 0)])[("j1", 0)].spec == {"cmd": "true"}  # specs: the store's


def test_a_status_changes_the_columns_it_wrote_and_an_ended_run_is_not_kept(owned) -> None:
    rows = owned.tasks_by_instance(KEYS, spec=False)
    rows[("j1", 0)].state, rows[("j1", 0)].host_id = "RUNNING", "h1"
    rows[("j1", 1)].state = "SUCCEEDED"
    with owned.transaction():
        owned.update_task_runs([rows[("j1", 0)], rows[("j1", 1)]], same_run=True)
    again = owned.tasks_by_instance(KEYS, spec=False)
    assert (again[("j1", 0)].state, again[("j1", 0)].host_id, again[("j1", 1)].state) == ("RUNNING", "h1", "SUCCEEDED")
    assert owned.reads == 1  # the ended run came from the store
    assert again == owned.store.tasks_by_instance(KEYS, spec=False)


def test_a_step_on_the_same_host_leaves_host_id_alone_and_a_move_writes_it(owned) -> None:
    rows = owned.tasks_by_instance(KEYS, spec=False)
    rows[("j1", 0)].state, rows[("j1", 0)].host_id = "PLACED", "h1"
    with owned.transaction():
        owned.update_task_runs([rows[("j1", 0)]], same_run=True)
    statements: list[str] = []
    owned.store.db.set_trace_callback(statements.append)
    rows = owned.tasks_by_instance(KEYS, spec=False)
    rows[("j1", 0)].state = "RUNNING"  # stays on h1
    rows[("j1", 1)].state, rows[("j1", 1)].host_id = "PLACED", "h2"  # comes to h2
    with owned.transaction():
        owned.update_task_runs([rows[("j1", 0)], rows[("j1", 1)]], same_run=True)
    owned.store.db.set_trace_callback(None)
    updates = [s for s in statements if s.startswith("UPDATE tasks")]
    assert len(updates) == 2 and sum("host_id" in s for s in updates) == 1, updates
    stored = owned.store.tasks_by_instance(KEYS, spec=False)
    assert [(stored[k].state, stored[k].host_id) for k in KEYS[:2]] == [("RUNNING", "h1"), ("PLACED", "h2")]
    assert owned.tasks_by_instance(KEYS, spec=False) == stored


def test_a_transaction_that_fails_forgets_what_it_wrote(owned) -> None:
    row = owned.tasks_by_instance([("j1", 0)], spec=False)[("j1", 0)]
    row.state = "RUNNING"
    with pytest.raises(RuntimeError), owned.transaction():
        owned.update_task_runs([row], same_run=True)
        raise RuntimeError("the batch broke")
    assert owned.rows == {}
    assert owned.tasks_by_instance([("j1", 0)], spec=False)[("j1", 0)].state == "PENDING"  # rolled back


def test_nothing_is_remembered_unless_both_inputs_hold_the_same_partitions(owned) -> None:
    owned.assigned({0}, {0, 1})  # a job's commands may go to another instance: memory could be wrong
    assert owned.rows == {}
    with owned.transaction():
        owned.create_jobs([job("j2")], tasks("j2"))
    owned.tasks_by_instance([("j2", 0)], spec=False)
    assert owned.rows == {} and owned.reads == 0  # straight from the store
    owned.assigned({0, 1}, {0, 1}, counts_agree=False)  # the same numbers of topics partitioned otherwise
    assert not owned.enabled
    owned.assigned({0, 1}, {0, 1})
    owned.tasks_by_instance([("j2", 0)], spec=False)
    assert owned.reads == 1 and ("j2", 0) in owned.rows


def test_a_deleted_job_is_forgotten_and_a_flood_past_the_limit_starts_again(owned) -> None:
    with owned.transaction():
        owned.delete_job("j1", 1)
    assert owned.tasks_by_instance(KEYS, spec=False) == {} and owned.rows == {}
    small = OwnedTasks(owned.store, limit=4)
    small.assigned({0}, {0})
    with small.transaction():
        small.create_jobs([job("a")], tasks("a", 3))
        small.create_jobs([job("b")], tasks("b", 3))
    assert set(small.rows) == {("b", 0), ("b", 1), ("b", 2)}
    assert dataclasses.asdict(small.tasks_by_instance([("a", 2)], spec=False)[("a", 2)])["task_id"] == "a-2-1"


@pytest.mark.parametrize("seed", range(6))
def test_counts_by_state_kept_in_memory_are_always_the_stores(owned, seed) -> None:
    # Random writes of every kind admit makes, through the remembered rows and around them (a row
    # not remembered, a task added by save_tasks, a failed transaction, a flood past the limit):
    # after each, the counts served are the store's own GROUP BY.
    import random

    rng = random.Random(seed)
    states = ["PENDING", "READY", "PLACED", "LAUNCHING", "RUNNING", "KILLING", "SUCCEEDED", "FAILED", "KILLED"]
    owned.limit = 8
    with owned.transaction():
        owned.create_jobs([job("j2")], tasks("j2", 5))
    served = 0
    for _ in range(120):
        job_id = rng.choice(["j1", "j2"])
        n = 3 if job_id == "j1" else 5
        keys = [(job_id, i) for i in rng.sample(range(n + 1), rng.randint(1, 3))]
        rows = owned.tasks_by_instance(keys, spec=rng.random() < 0.2)
        for row in rows.values():
            row.state, row.host_id = rng.choice(states), rng.choice(["", "h1", "h2"])
        written = list(rows.values()) + ([rows[keys[0]]] if keys[0] in rows and rng.random() < 0.2 else [])
        kind = rng.random()
        try:
            with owned.transaction():
                if kind < 0.15:  # a task of the job not made yet, or made again whole
                    new = TaskRow(job_id, n, 1, f"{job_id}-{n}-1", "/p", "g", rng.choice(states), {"cmd": "true"})
                    owned.save_tasks([new, *rows.values()])
                else:
                    owned.update_task_runs(written, same_run=kind < 0.8)
                if rng.random() < 0.1:
                    raise RuntimeError("the batch broke")
        except RuntimeError:
            pass
        if rng.random() < 0.05:
            owned.forget()
        for j in ("j1", "j2"):
            served += j in owned.counts
            assert owned.task_state_counts([j]) == owned.store.task_state_counts([j])
    assert served > 60  # mostly from memory
