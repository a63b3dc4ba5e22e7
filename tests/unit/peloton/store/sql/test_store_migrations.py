"""The SQL stores' numbered migrations: one schema that SQLite and PostgreSQL both build, stores made
before numbered migrations adopted and upgraded in place, and every file of a SQLite store
migrated on its own. The stores made before are fixtures (tests/fixtures/store) written by the
store code of then, rows and all."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from peloton.store import JobRow, Launch, TaskRow, open_store
from peloton.store.sql.migrate import LATEST, MIGRATIONS, Migration, load, parse

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "store"


def check_seeded(store) -> None:
    """What the fixtures' stores hold, read through the gateway."""
    a = store.get_job("a")
    assert (a.name, a.state, a.priority, a.preemptible, a.revocable, a.rollout) == (
        "etl", "RUNNING", 2, True, False, {"update_id": "u1"})
    assert store.get_job("d") is None and store.deleted_jobs(["d", "a"]) == {"d": 7}
    tasks = store.tasks_of_job("a")
    assert [(t.spec["task_id"], t.spec["command"]) for t in tasks] == [
        ("a-0-1", "true"), ("a-1-1", "true"), ("a-2-1", "false")]
    assert (tasks[0].state, tasks[0].host_id, tasks[0].health, tasks[0].updated_ms) == ("RUNNING", "h1", "HEALTHY", 9)
    assert [(e["task_id"], e["state"], e["host_id"], e["message"]) for e in store.task_events("a")] == [
        ("a-0-1", "RUNNING", "h1", "up")]
    assert store.command_outcome("c1") == {"state": "applied", "job_id": "a", "at_ms": 5}
    assert store.command_outcome("c2") == {"state": "refused", "job_id": "a", "pool": "/p", "kind": "CREATE",
                                           "reason": "no such pool", "at_ms": 6}
    assert store.get_update("u1")["state"] == "ROLLING_FORWARD" and store.job_config("a", 1) == "cfg-a"
    assert store.host_states() == {"h2": "DRAINING"}
    assert (store.get_token("tok1").user, store.get_token("tok1").groups) == ("alice", ("team-a",))
    assert store.list_pools() == {"/p": {"path": "/p", "limit": 1, "updated_ms": 3}}
    assert [g.gang_id for g in store.queued_gangs()] == ["g2"] and [g.gang_id for g in store.unsent_admissions()] == [
        "g1"]
    assert [(x.task_id, x.priority, x.preemptible) for x in store.allocations()] == [("a-0-1", 2, True)]
    assert store.allocation_states(["a-0-1", "a-1-1"]) == {"a-0-1": "held", "a-1-1": "released"}
    assert [x.task_id for x in store.active_launches(["h1"])] == ["a-0-1"]
    assert store.ended_launches(["h1"], 0) == [{"task_id": "a-1-1", "state": "TASK_FINISHED"}]
    # ... and it is written as a store made now is.
    assert store.claim_launches([Launch("a-1-1", "a", 1, 1, "h1", 1, 1, 1, 0, 5)]) == set()
    spec = {"resources": {"cpu": 1}, "command": "true"}
    b = JobRow("b", "n", "/p", "BATCH", "PENDING", 2, 0, True, "PACK_HOST", "me", "cfg", 20, 20)
    store.create_jobs([b], [TaskRow("b", i, 1, f"b-{i}-1", "/p", f"b-{i}-1", "LAUNCHED",
                                    {"task_id": f"b-{i}-1", "job_id": "b", "instance": i, "run_id": 1, **spec})
                            for i in range(2)])
    assert [t.spec["task_id"] for t in store.tasks_in_states(["LAUNCHED"], 10**15)] == ["b-0-1", "b-1-1"]
    assert store.forget_released_allocations(13, 10) == 1


def sqlite_store_made_before(path: Path) -> None:
    for part, file in (("main", path), ("allocations", path.with_name(f"{path.stem}.allocations{path.suffix}")),
                       ("launches", path.with_name(f"{path.stem}.launches{path.suffix}"))):
        db = sqlite3.connect(file)
        db.executescript((FIXTURES / f"sqlite_before_migrations.{part}.sql").read_text())
        db.close()


def test_a_sqlite_store_made_before_numbered_migrations_is_adopted_migrated_and_read(tmp_path) -> None:
    path = tmp_path / "peloton.db"
    sqlite_store_made_before(path)
    store = open_store(str(path))
    try:
        assert store.schema_version == LATEST
        for part in ("main", "allocations", "launches"):  # every file counts every migration
            assert store.connection(part).execute("SELECT version, name FROM schema_version ORDER BY version"
                                                  ).fetchall() == [(m.version, m.name) for m in MIGRATIONS]
        check_seeded(store)
    finally:
        store.close()
    again = open_store(str(path))  # adopted once: nothing runs a second time
    try:
        assert again.connection().execute("SELECT count(*) FROM schema_version").fetchone() == (LATEST,)
        assert again.get_job("b") is not None
    finally:
        again.close()


@pytest.mark.servers
def test_a_postgres_database_made_before_numbered_migrations_is_adopted_migrated_and_read(postgres_server) -> None:
    import psycopg

    url = postgres_server.create_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute((FIXTURES / "postgres_before_migrations.sql").read_text())
    store = open_store(url)
    try:
        assert store.schema_version == LATEST
        with store.transaction() as conn:
            assert conn.execute("SELECT version, name FROM schema_version ORDER BY version").fetchall() == [
                (m.version, m.name) for m in MIGRATIONS]
            indexes = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"))
        # The indexes over every row gave way to the partial ones SQLite has.
        assert not {"jobs_by_state", "tasks_by_state", "launches_by_host", "launches_by_end"} & set(indexes)
        assert {"tasks_waiting_by_state", "launches_running_by_host", "launches_ended"} <= set(indexes)
        assert "WHERE (released_ms IS NOT NULL)" in indexes["allocations_released"]
        check_seeded(store)
        with store.transaction() as conn:  # the new job's alike tasks share one spec, as in SQLite
            assert conn.execute("SELECT job_id FROM job_task_specs").fetchall() == [("b",)]
            assert conn.execute("SELECT count(*) FROM tasks WHERE job_id = 'b' AND spec IS NULL").fetchone() == (2,)
    finally:
        store.close()


def schema_of_sqlite(store) -> tuple[dict[str, set[str]], set[str]]:
    tables: dict[str, set[str]] = {}
    indexes: set[str] = set()
    for part in ("main", "allocations", "launches"):
        db = store.connection(part)
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            tables[table] = {r[0] for r in db.execute("SELECT name FROM pragma_table_info(?)", (table,))}
        indexes |= {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                                             "AND name NOT LIKE 'sqlite_autoindex%'")}
    return tables, indexes


@pytest.mark.servers
def test_sqlite_and_postgres_build_the_same_tables_columns_and_indexes(postgres_server, tmp_path) -> None:
    sqlite_store = open_store(str(tmp_path / "peloton.db"))
    postgres_store = open_store(postgres_server.create_database())
    try:
        tables, indexes = schema_of_sqlite(sqlite_store)
        with postgres_store.transaction() as conn:
            columns = conn.execute("SELECT table_name, column_name FROM information_schema.columns "
                                   "WHERE table_schema = 'public'").fetchall()
            pg_indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public' "
                                                     "AND indexname NOT LIKE '%_pkey'")}
        pg_tables: dict[str, set[str]] = {}
        for table, column in columns:
            pg_tables.setdefault(table, set()).add(column)
        # PostgreSQL numbers events as inserted in a column; SQLite's rowid does it.
        for table in ("task_events", "task_event_batches"):
            pg_tables[table].remove("seq")
        assert pg_tables == tables
        assert pg_indexes == indexes
        assert "job_task_specs" in tables
    finally:
        sqlite_store.close()
        postgres_store.close()


def test_a_new_migration_runs_once_in_each_sqlite_file_its_part_names(tmp_path, monkeypatch) -> None:
    """A migration's statements for one part go to that part's file alone; every file records it."""
    import peloton.store.sql.migrate as migrate

    path = tmp_path / "peloton.db"
    open_store(str(path)).close()
    extra = parse(f"{LATEST + 1:04d}_a_queue_note.sql",
                  "-- part: allocations\nCREATE TABLE queue_notes (gang_id TEXT PRIMARY KEY, note TEXT);\n"
                  "-- part: launches\nALTER TABLE launches ADD COLUMN note TEXT;")
    monkeypatch.setattr(migrate, "MIGRATIONS", [*MIGRATIONS, extra])
    store = open_store(str(path))
    try:
        assert store.schema_version == LATEST + 1
        tables, _ = schema_of_sqlite(store)
        assert "queue_notes" in tables and "note" in tables["launches"]
        assert {r[0] for r in store.connection("allocations").execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")} == {"allocations", "queued_gangs", "queue_notes",
                                                                        "schema_version"}
        assert store.connection("main").execute("SELECT max(version) FROM schema_version").fetchone() == (LATEST + 1,)
    finally:
        store.close()
    open_store(str(path)).close()  # applied: not again (ADD COLUMN twice would fail)


def test_migration_files_are_numbered_without_a_gap_and_name_known_parts(tmp_path) -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, LATEST + 1))
    assert all(isinstance(m, Migration) and m.parts for m in MIGRATIONS)
    with pytest.raises(ValueError, match="no part is named 'jobs'"):
        parse("0009_x.sql", "-- part: jobs\nCREATE TABLE x (a TEXT);")
    with pytest.raises(ValueError, match="NNNN_words.sql"):
        parse("9_x.sql", "")
    (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (x TEXT);")
    (tmp_path / "0003_c.sql").write_text("CREATE TABLE c (x TEXT);")
    with pytest.raises(ValueError, match="without a gap"):
        load(tmp_path)


def test_the_partial_index_of_waiting_tasks_has_the_querys_condition_word_for_word() -> None:
    """SQLite uses a partial index only for a query that repeats its condition."""
    from peloton.store.sql.jobs import WAITING

    [index] = [s for s in MIGRATIONS[0].parts["main"] if "tasks_waiting_by_state" in s]
    assert " ".join(index.split()).endswith(f"WHERE {WAITING}"), index
