"""What the SQLite store alone does: its indexes and the queries that use them, its tables in
several files, alike specs written once."""

from __future__ import annotations

import pytest

from peloton.store import Allocation, Launch, QueuedGang, TaskRow, open_store
from tests.builders.store import job, launch_spec_of, task


def test_sqlite_indexes_only_the_states_asked_for_and_its_query_uses_that_index(tmp_path) -> None:
    """A status rewrote an index entry over every state (a third of a task row's update); the
    partial index holds INDEXED_STATES only, and tasks_in_states must still be served by it."""
    import sqlite3

    path = tmp_path / "old.db"
    open_store(str(path)).close()
    old = sqlite3.connect(path)  # now as files made before numbered migrations had it: an index over every state
    old.executescript("DROP INDEX tasks_waiting_by_state; CREATE INDEX tasks_by_state ON tasks (state, updated_ms); "
                      "DROP TABLE schema_version;")
    old.close()
    store = open_store(str(path))
    try:
        indexes = {r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "tasks_by_state" not in indexes and "tasks_waiting_by_state" in indexes
        store.create_jobs([job("w")], [task("w", 0, "RUNNING"), task("w", 1, "LAUNCHED")])
        assert [x.instance for x in store.tasks_in_states(["LAUNCHED", "STARTING"], 10**15)] == [1]
        traced: list[str] = []
        store.db.set_trace_callback(traced.append)
        store.tasks_in_states(["LAUNCHED"], 10**15)
        store.db.set_trace_callback(None)
        [query] = [q for q in traced if "updated_ms" in q]  # with its values filled in
        plan = " ".join(str(r) for r in store.db.execute("EXPLAIN QUERY PLAN " + query))
        assert "USING INDEX tasks_waiting_by_state" in plan, plan
        with pytest.raises(ValueError, match="RUNNING"):
            store.tasks_in_states(["RUNNING"], 10**15)
    finally:
        store.close()


def test_sqlite_indexes_launches_by_host_while_they_run_and_by_end_once_ended(tmp_path) -> None:
    """Over every row, each claim and end wrote a page of an index as large as the table; the
    partial indexes hold the running launches by host and the ended ones by end, and every query
    of launch's is still served by one. Nothing indexes them by job: only tests count a job's."""
    from peloton.store.sqlite import LAUNCHES

    store = open_store(str(tmp_path / "s.db"))
    try:
        launches = store.connection(LAUNCHES)
        indexes = {r[0] for r in launches.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"launches_running_by_host", "launches_ended"} <= indexes and "launches_by_job" not in indexes
        rows = [Launch(f"t{i}", "j", i, 1, f"h{i % 2}", 1, 1, 1, 0, 10) for i in range(4)]
        assert store.claim_launches(rows) == {"t0", "t1", "t2", "t3"}
        assert store.claim_launches(rows[:2] + [Launch("t9", "j", 9, 1, "h0", 1, 1, 1, 0, 10)]) == {"t9"}
        store.end_launches(["t0", "t1"], 20, {"t0": {"task_id": "t0"}, "t1": {"task_id": "t1"}})
        traced: list[str] = []
        launches.set_trace_callback(traced.append)
        assert sorted(x.task_id for x in store.active_launches(["h0"])) == ["t2", "t9"]
        assert sorted(store.active_launch_hosts()) == ["h0", "h1"]
        assert store.ended_launches(["h1"], 15) == [{"task_id": "t1"}]
        assert store.launch_counts("j") == {0: 1, 1: 1, 2: 1, 3: 1, 9: 1}  # a test's question: it reads every row
        assert store.forget_launches(10**15, 10) == 2
        launches.set_trace_callback(None)
        for query, index in (("WHERE ended_ms IS NULL AND host_id", "launches_running_by_host"),
                             ("SELECT DISTINCT host_id", "launches_running_by_host"),
                             ("WHERE ended_ms >= ", "launches_ended"), ("WHERE ended_ms < ", "launches_ended")):
            [sql] = [q for q in traced if query in q]
            plan = " ".join(str(r) for r in launches.execute("EXPLAIN QUERY PLAN " + sql))
            assert index in plan, (query, plan)
    finally:
        store.close()


def test_sqlite_moves_the_tables_of_a_file_made_before_its_parts_into_their_files(tmp_path) -> None:
    """A file made when every table was in it (launches with the indexes of then, allocations
    without the columns added since): its rows move to the parts' files, once, and the tables
    leave it; a second store opened on it finds them moved."""
    import sqlite3

    from peloton.store.sqlite import ALLOCATIONS, LAUNCHES

    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE launches (task_id TEXT PRIMARY KEY, job_id TEXT, instance INTEGER, run_id INTEGER, "
        "host_id TEXT, cpu REAL, mem_mb REAL, disk_mb REAL, gpu REAL, launched_ms INTEGER, ended_ms INTEGER);"
        "CREATE INDEX launches_by_host ON launches (host_id, ended_ms); "
        "CREATE INDEX launches_by_job ON launches (job_id);"
        "INSERT INTO launches VALUES ('t0', 'j', 0, 1, 'h0', 1, 1, 1, 0, 10, NULL);"
        "CREATE TABLE allocations (task_id TEXT PRIMARY KEY, pool TEXT, gang_id TEXT, cpu REAL, mem_mb REAL, "
        "disk_mb REAL, gpu REAL, admitted_ms INTEGER);"
        "INSERT INTO allocations VALUES ('t0', '/p', 'g0', 1, 2, 3, 0, 5);"
        "CREATE TABLE queued_gangs (gang_id TEXT PRIMARY KEY, pool TEXT, priority INTEGER, seq INTEGER, gang TEXT, "
        "not_before_ms INTEGER);"
        "INSERT INTO queued_gangs VALUES ('g1', '/p', 0, 7, '{\"gang_id\": \"g1\"}', 0);")
    old.close()
    store, again = open_store(str(path)), None
    try:
        tables = {r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert not {"launches", "allocations", "queued_gangs"} & tables and "tasks" in tables
        assert store.claim_launches([Launch("t0", "j", 0, 1, "h0", 1, 1, 1, 0, 10)]) == set()  # moved: claimed before
        assert [x.task_id for x in store.active_launches(["h0"])] == ["t0"]
        assert [(a.task_id, a.mem_mb) for a in store.allocations()] == [("t0", 2)]
        assert [g.gang_id for g in store.queued_gangs()] == ["g1"]
        listed = store.connection(LAUNCHES).execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        indexes = {r[0] for r in listed}
        assert "launches_running_by_host" in indexes and not {"launches_by_host", "launches_by_job"} & indexes
        assert store.part_path(ALLOCATIONS) == tmp_path / "old.allocations.db"
        again = open_store(str(path))  # nothing left to move: the rows stay once
        assert len(again.allocations()) == 1 and len(again.active_launches(["h0"])) == 1
    finally:
        store.close()
        if again is not None:
            again.close()


def test_sqlite_writes_a_jobs_alike_specs_once_not_in_each_task_row(tmp_path) -> None:
    # The spec is most of a task row: in each row, 100 rows spread over 17 pages that every step
    # of the runs wrote again (the job manager alone: 66-75 -> 60-68 us a task without it).
    from peloton.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "s.db")
    try:
        tasks = [TaskRow("a", i, 1, f"a-{i}-1", "/p", f"a-{i}-1", "PENDING", launch_spec_of("a", i)) for i in range(3)]
        tasks.append(TaskRow("a", 3, 1, "a-3-1", "/p", "a-3-1", "PENDING", launch_spec_of("a", 3, command="false")))
        tasks.append(task("c", 0))  # a spec without the whole identity (its task id alone) is kept whole
        store.create_jobs([job("a"), job("c")], tasks)
        db = store.connection()
        rows = dict(db.execute("SELECT task_id, spec FROM tasks"))
        assert [rows[f"a-{i}-1"] for i in range(3)] == [None, None, None]
        assert rows["a-3-1"] is not None and rows["c-0-1"] is not None
        assert [r[0] for r in db.execute("SELECT job_id FROM job_task_specs")] == ["a"]
        store.delete_job("a", 9)
        assert db.execute("SELECT COUNT(*) FROM job_task_specs").fetchone() == (0,)
    finally:
        store.close()


def test_sqlite_indexes_tasks_by_host_once_they_have_one_and_not_by_task_id(tmp_path) -> None:
    """Nothing reads tasks by task id, and a new task's empty host took a place in an index over
    every row: files made before lose both, and runs on hosts are still found through the partial
    index that replaces the second."""
    import sqlite3

    path = tmp_path / "old.db"
    open_store(str(path)).close()
    old = sqlite3.connect(path)  # as files made before numbered migrations had them
    old.executescript("DROP INDEX tasks_placed_by_host; CREATE INDEX tasks_by_task_id ON tasks (task_id); "
                      "CREATE INDEX tasks_by_host ON tasks (host_id); DROP TABLE schema_version;")
    old.close()
    store = open_store(str(path))
    try:
        indexes = {r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert not {"tasks_by_task_id", "tasks_by_host"} & indexes and "tasks_placed_by_host" in indexes
        tasks = [task("a", i, "RUNNING") for i in range(3)]
        tasks[0].host_id, tasks[1].host_id = "h1", "h2"  # the third has no host yet
        store.create_jobs([job("a")], tasks)
        assert store.db.execute("SELECT COUNT(*) FROM tasks INDEXED BY tasks_placed_by_host "
                                "WHERE host_id != ''").fetchone() == (2,)
        traced: list[str] = []
        store.db.set_trace_callback(traced.append)
        assert [t.instance for t in store.tasks_on_hosts(["h1", "h2", ""], ["RUNNING"])] == [0, 1]
        store.db.set_trace_callback(None)
        [sql] = [q for q in traced if "FROM tasks WHERE host_id" in q]
        plan = " ".join(str(r) for r in store.db.execute("EXPLAIN QUERY PLAN " + sql))
        assert "tasks_placed_by_host" in plan, plan
    finally:
        store.close()


def test_events_a_file_holds_one_row_each_are_read_before_the_batches(tmp_path) -> None:
    s = open_store(str(tmp_path / "old.db"))
    s.db.execute("INSERT INTO task_events (task_id, job_id, instance, run_id, state, reason, exit_code, timestamp_ms, "
                 "host_id, message) VALUES ('a-0-1', 'a', 0, 1, 'PENDING', '', NULL, 1, '', '')")
    s.record_task_events([("a-0-1", "a", 0, 1, "READY", "", None, 2, "", "")])
    assert [e["state"] for e in s.task_events("a")] == ["PENDING", "READY"]


def test_sqlite_forgets_released_allocations_through_the_index_of_released_ones(tmp_path) -> None:
    from peloton.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "s.db")
    store.add_allocations([Allocation(f"t{i}", "/p", f"g{i}", 1, 1, 1, 0, 1) for i in range(4)])
    store.release_allocations(["t0", "t1"], 5)
    store.release_allocations(["t2"], 50)
    statements: list[str] = []
    allocations = store.connection("allocations")
    allocations.set_trace_callback(statements.append)
    assert store.forget_released_allocations(10, 100) == 2
    allocations.set_trace_callback(None)
    [sql] = [s for s in statements if s.startswith("DELETE")]
    plan = " ".join(row[3] for row in allocations.execute("EXPLAIN QUERY PLAN " + sql))
    assert "USING INDEX allocations_released (released_ms<?)" in plan, plan
    assert store.allocation_states(["t0", "t2", "t3"]) == {"t2": "released", "t3": "held"}
    assert [a.task_id for a in store.allocations()] == ["t3"]  # held ones: a scan, read at start
    store.close()


def test_sqlite_finds_the_rows_of_an_id_list_by_their_key(tmp_path) -> None:
    # A statement over a JSON list of ids (json_each) must look each id up by its key: SQLite may
    # otherwise prefer another index and test every row it holds against the list.
    from peloton.store.sqlite import PARTS, SqliteStore

    store = SqliteStore(tmp_path / "s.db")
    statements: dict[str, list[str]] = {part: [] for part in PARTS}  # each file's, read by its connection
    for part, said in statements.items():
        store.connection(part).set_trace_callback(said.append)
    store.create_jobs([job("a")], [task("a", i) for i in range(3)])
    moved = [task("a", i, "RUNNING") for i in range(3)]
    store.update_task_runs(moved, same_run=True, same_host=True)
    store.update_task_runs(moved, same_run=True)
    store.update_task_runs(moved)
    gangs = [QueuedGang(f"g{i}", "/p", 0, i, {"gang_id": f"g{i}"}) for i in range(3)]
    store.queue_gangs(gangs)
    store.admit_gangs([g.gang_id for g in gangs], [Allocation(f"t{i}", "/p", f"g{i}", 1, 1, 1, 0, 1) for i in range(3)])
    store.release_allocations(["t0", "t1"], 5)
    store.unqueue_gangs(["g0", "g1"])
    listed = {(part, s) for part, said in statements.items() for s in said if "json_each" in s}
    assert len(listed) >= 5, listed
    for part, sql in listed:
        store.connection(part).set_trace_callback(None)
        plan = [row[3] for row in store.connection(part).execute(
            "EXPLAIN QUERY PLAN " + sql.replace("RETURNING gang_id", ""))]
        assert plan[0].startswith("SEARCH") and "sqlite_autoindex" in plan[0], (sql, plan)
    store.close()


def test_sqlite_names_every_file_it_makes_so_a_new_stack_can_remove_them(tmp_path) -> None:
    """`dev up` starts a new cluster with an empty store by removing its files: a part's file
    left behind would hold allocations and launches that nothing will ever release."""
    from peloton.store.sqlite import store_files

    store = open_store(str(tmp_path / "peloton.db"))
    store.create_jobs([job("a")], [task("a", 0)])
    store.add_allocations([Allocation("t0", "/p", "g0", 1, 1, 1, 0, 1)])
    store.claim_launches([Launch("t0", "a", 0, 1, "h0", 1, 1, 1, 0, 10)])
    made = set(tmp_path.iterdir())
    store.close()
    assert {f.name for f in made if f.suffix == ".db"} == {"peloton.db", "peloton.allocations.db",
                                                           "peloton.launches.db"}
    assert made <= set(store_files(tmp_path / "peloton.db")), made - set(store_files(tmp_path / "peloton.db"))
