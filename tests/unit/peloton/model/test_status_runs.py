"""The host manager's statuses as TaskStatusRuns records (peloton.model.events.StatusRuns)."""

from __future__ import annotations

from peloton.model.events import RUNS_PER_RECORD, StatusRuns, statuses_of_runs
from peloton.serde import registry


def states(runs: StatusRuns) -> list[tuple[str, str, list[int]]]:
    return [(job_id, r["state"], [run["instance"] for run in r["runs"]]) for job_id, r in runs.records]


def test_a_hosts_interleaved_changes_make_one_record_per_job_and_status_each_runs_in_order() -> None:
    runs = StatusRuns()
    for i in range(3):  # as an agent reports them: each run's STARTING, then its RUNNING a moment later
        runs.add("j", i, 1, "h1", "TASK_STARTING", 10 + i)
        runs.add("j", i, 1, "h1", "TASK_RUNNING", 15 + i, health="DISABLED")
    runs.add("k", 0, 2, "h2", "TASK_RUNNING", 20, health="DISABLED")
    runs.add("j", 0, 1, "h1", "TASK_FINISHED", 30, exit_code=0)
    runs.add("j", 1, 1, "h1", "TASK_FAILED", 31, reason="REASON_COMMAND_EXECUTOR_FAILED", message="code 2", exit_code=2)
    assert states(runs) == [("j", "TASK_STARTING", [0, 1, 2]), ("j", "TASK_RUNNING", [0, 1, 2]),
                            ("k", "TASK_RUNNING", [0]), ("j", "TASK_FINISHED", [0]), ("j", "TASK_FAILED", [1])]
    assert not any(r["with_starting"] for _, r in runs.records)
    # each run is the TaskStatus it stands for, and the record is valid Avro
    [failed] = [status for _, r in runs.records if r["state"] == "TASK_FAILED" for status in statuses_of_runs(r)]
    assert {k: failed[k] for k in ("task_id", "host_id", "reason", "message", "exit_code", "timestamp_ms")} == {
        "task_id": "j-1-1", "host_id": "h1", "reason": "REASON_COMMAND_EXECUTOR_FAILED", "message": "code 2",
        "exit_code": 2, "timestamp_ms": 31}
    assert registry().decode(registry().encode("peloton.TaskStatus", failed))[1] == failed
    for _, r in runs.records:
        assert registry().decode(registry().encode("peloton.TaskStatusRuns", r))[1] == r
    # each run's time as its offset from the record's (a byte or two), earlier ones too
    first = runs.records[0][1]
    assert (first["timestamp_ms"], [run["offset_ms"] for run in first["runs"]]) == (10, [0, 1, 2])
    late = StatusRuns()
    late.add("j", 0, 1, "h1", "TASK_RUNNING", 1_700_000_000_500)
    late.add("j", 1, 1, "h1", "TASK_RUNNING", 1_700_000_000_450)
    [(_, record)] = late.records
    assert [s["timestamp_ms"] for s in statuses_of_runs(registry().decode(registry().encode(
        "peloton.TaskStatusRuns", record))[1])] == [1_700_000_000_500, 1_700_000_000_450]
    started = statuses_of_runs(runs.records[0][1])  # each its own record, with its own run's fields
    assert [(s["task_id"], s["instance"], s["timestamp_ms"], s["state"]) for s in started] == [
        ("j-0-1", 0, 10, "TASK_STARTING"), ("j-1-1", 1, 11, "TASK_STARTING"), ("j-2-1", 2, 12, "TASK_STARTING")]


def test_a_change_never_joins_a_record_before_the_runs_last_change() -> None:
    runs = StatusRuns()
    runs.add("j", 0, 1, "h1", "TASK_RUNNING", 1, health="HEALTH_UNKNOWN")
    runs.add("j", 1, 1, "h1", "TASK_RUNNING", 1, health="HEALTHY")
    runs.add("j", 1, 1, "h1", "TASK_RUNNING", 2, health="HEALTH_UNKNOWN")  # run 1 sick again, after it was healthy
    # joining the first record would put run 1's later change before its earlier one
    assert [(r["health"], [run["instance"] for run in r["runs"]]) for _, r in runs.records] == [
        ("HEALTH_UNKNOWN", [0]), ("HEALTHY", [1]), ("HEALTH_UNKNOWN", [1])]


def test_a_record_holds_a_bounded_number_of_runs() -> None:
    runs = StatusRuns()
    for i in range(RUNS_PER_RECORD + 1):
        runs.add("j", i, 1, "h1", "TASK_RUNNING", 1)
    assert [len(r["runs"]) for _, r in runs.records] == [RUNS_PER_RECORD, 1]


def test_a_start_reported_at_one_instant_goes_as_its_running_record_and_reads_as_both() -> None:
    """Both drivers report a run's STARTING and RUNNING at one instant: the RUNNING record says it
    holds the STARTING too (one run less to write and read), and its readers see what the two
    records would have told, every STARTING first."""
    runs = StatusRuns()
    for i in range(3):
        runs.add("j", i, 1, "h1", "TASK_STARTING", 10 + i)
        runs.add("j", i, 1, "h1", "TASK_RUNNING", 10 + i, health="HEALTHY")
    runs.add("j", 3, 1, "h1", "TASK_STARTING", 20)  # its RUNNING not yet: sent alone
    [(_, both), (_, alone)] = runs.records
    assert (both["state"], both["with_starting"], [r["instance"] for r in both["runs"]]) == (
        "TASK_RUNNING", True, [0, 1, 2])
    assert (alone["state"], alone["with_starting"], [r["instance"] for r in alone["runs"]]) == (
        "TASK_STARTING", False, [3])
    read = statuses_of_runs(registry().decode(registry().encode("peloton.TaskStatusRuns", both))[1])
    assert [(s["state"], s["task_id"], s["timestamp_ms"], s["health"]) for s in read] == [
        ("TASK_STARTING", "j-0-1", 10, ""), ("TASK_STARTING", "j-1-1", 11, ""), ("TASK_STARTING", "j-2-1", 12, ""),
        ("TASK_RUNNING", "j-0-1", 10, "HEALTHY"), ("TASK_RUNNING", "j-1-1", 11, "HEALTHY"),
        ("TASK_RUNNING", "j-2-1", 12, "HEALTHY")]
    # a STARTING followed by another run's change, or by its RUNNING later, keeps its own record
    apart = StatusRuns()
    apart.add("j", 0, 1, "h1", "TASK_STARTING", 10)
    apart.add("j", 1, 1, "h1", "TASK_FINISHED", 10, exit_code=0)
    apart.add("j", 0, 1, "h1", "TASK_RUNNING", 10)
    assert states(apart) == [("j", "TASK_STARTING", [0]), ("j", "TASK_FINISHED", [1]), ("j", "TASK_RUNNING", [0])]


def test_a_record_written_before_with_starting_reads_as_its_own_status_alone() -> None:
    from peloton.serde import registry as reg

    r = reg()
    old_id = r.by_name["peloton.TaskStatusRuns"][0] - 1  # ids.yaml: the version before, @1
    assert r.by_id[old_id][0] == "peloton.TaskStatusRuns"
    import io
    import json
    import struct

    import fastavro

    from peloton.serde import SCHEMA_DIR

    old = fastavro.parse_schema(json.loads((SCHEMA_DIR / "TaskStatusRuns.v1.avsc").read_text()),
                                named_schemas=dict(r.named))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, {"event_id": "e", "job_id": "j", "state": "TASK_RUNNING", "reason": "",
                                          "message": "", "exit_code": None, "signal": None, "health": "",
                                          "timestamp_ms": 5, "runs": [{"instance": 0, "run_id": 1, "host_id": "h"}]})
    name, record = r.decode(struct.pack(">bI", 0, old_id) + buf.getvalue())
    assert name == "peloton.TaskStatusRuns" and record["with_starting"] is False
    assert [s["state"] for s in statuses_of_runs(record)] == ["TASK_RUNNING"]
