"""The job manager (AdmitStage) without a broker: records fed by hand, views given, output read
from a recording emitter (the store is a real SQLite file). Jobs created, refused and deleted,
statuses moving runs, failed runs run again. The integration tests prove the wiring; these the
decisions."""

from __future__ import annotations

import time
import uuid

from peloton.model.pool import parse_pool_config
from peloton.runtime import Record, RecordingEmitter, StaticView, decode_message, handle_batch
from peloton.serde import registry
from peloton.store import Allocation
from peloton.topics import Catalogue, partition_for
from stages.admit.stage import AdmitStage
from stages.entitle.stage import EntitleStage
from tests.builders.stages import JOB, POOL, bound, command, host_state, record, status_record


def test_admit_stores_a_job_and_sends_its_gangs(admit, store) -> None:
    stage, out = admit
    stage.handle([command("a", JOB.format(name="a", count=3, gang=2, cpu=1))])
    assert store.get_job("a").state == "PENDING"
    demand = out.take("task-demand")
    assert [len(v["tasks"]) for _, _, _, v in demand] == [2, 1]


def test_admit_reads_only_the_pools_a_batch_names_and_the_whole_tree_to_say_what_is_wrong(admit, store) -> None:
    stage, out = admit
    store.put_pool("/p2", parse_pool_config(POOL, "/p2"))
    store.put_pool("/p2/leaf", parse_pool_config(POOL, "/p2/leaf"))
    whole_reads = []
    list_pools = store.list_pools
    store.list_pools = lambda: whole_reads.append(1) or list_pools()
    spec = JOB.format(name="a", count=1, gang=1, cpu=1)
    stage.handle([command("a", spec), command("b", spec, pool="/p2/leaf"), command("c", spec)])
    assert [store.get_job(j).state for j in "abc"] == ["PENDING"] * 3 and not whole_reads
    stage.handle([command("d", spec, pool="/p2"), command("e", spec, pool="/nowhere")])
    assert store.get_job("d") is None and store.get_job("e") is None and len(whole_reads) == 2
    d, e = (letter["reason"] for _, _, _, letter in out.take("dead-letters"))
    assert d == "resource pool '/p2' is not a leaf pool; jobs go to leaf pools only"
    assert e == "unknown resource pool '/nowhere' (known pools: /p, /p2, /p2/leaf)"


def test_admit_forgets_commands_older_than_their_topic_keeps_and_no_newer(admit, store) -> None:
    from peloton.runtime.record import now_ms
    from peloton.store import CLAIMS_KEPT_MS

    stage, _ = admit
    store.claim_commands(["ancient"], ["a"], 0)
    store.claim_commands(["fresh"], ["a"], now_ms() - CLAIMS_KEPT_MS + 60_000)
    stage.tick(10.0)  # the first tick sweeps, the next ones an hour later
    assert store.command_outcome("ancient") is None and store.command_outcome("fresh")["state"] == "applied"
    store.claim_commands(["ancient2"], ["a"], 0)
    stage.tick(20.0)
    assert store.command_outcome("ancient2") is not None


def test_a_deleted_jobs_id_is_not_taken_again_and_its_create_read_again_makes_nothing(admit, store) -> None:
    """A new job under a deleted job's id would have its runs' ids (job-instance-run), which the
    stages still hold as the old runs' claims: entitle would take its demand for the old one's."""
    stage, out = admit
    first = command("a", JOB.format(name="a", count=1, gang=1, cpu=1))
    stage.handle([first])
    store.delete_job("a", 1_795_000_000_000)
    out.take()
    stage.handle([first])  # the deleted job's own create, read again
    assert store.get_job("a") is None and out.take() == []
    again = command("a", JOB.format(name="again", count=1, gang=1, cpu=1))
    stage.handle([again])
    assert store.get_job("a") is None and out.take("task-demand") == []
    [(_, _, _, letter)] = out.take("dead-letters")
    assert letter["reason"] == ("job a was deleted at 2026-11-18 11:06 UTC; its id can be used again from about "
                                "2026-11-27 11:06 UTC, when the stages have forgotten its runs (choose another id)")
    assert store.command_outcome(again.value["command_id"])["state"] == "refused"


def test_admit_deletes_jobs_of_its_partitions_that_ended_longer_ago_than_their_retention(admit, store) -> None:
    import dataclasses

    from peloton.runtime.record import now_ms

    stage, out = admit
    day = 86_400_000
    jobs = {"old": ("SUCCEEDED", now_ms() - 31 * day), "recent": ("FAILED", now_ms() - day),
            "running": ("RUNNING", None)}
    jobs["theirs"] = ("KILLED", now_ms() - 40 * day)
    for job_id in jobs:
        stage.handle([command(job_id, JOB.format(name=job_id, count=1, gang=1, cpu=1))])
    store.update_jobs([dataclasses.replace(store.get_job(j), state=state, completed_ms=at)
                       for j, (state, at) in jobs.items()])
    theirs = partition_for("theirs", 4)
    assert partition_for("old", 4) != theirs  # the test's premise
    stage.on_assign([("job-commands", p) for p in range(4) if p != theirs])
    stage.tick(10.0)
    assert store.get_job("old") is None and "old" in store.deleted_jobs(["old"])
    assert store.tasks_of_job("old") == []
    assert all(store.get_job(j) is not None for j in ("recent", "running", "theirs"))
    stage.settings = dataclasses.replace(stage.settings, job_retention_s=0)  # 0: kept until deleted
    stage.on_assign([("job-commands", theirs)])
    stage.tick(100.0)
    assert store.get_job("theirs") is not None


def test_a_gang_larger_than_its_pool_is_refused_with_the_numbers(admit, store) -> None:
    stage, out = admit
    stage.handle([command("big", JOB.format(name="big", count=10, gang=10, cpu=1))])
    assert store.get_job("big") is None
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "instances 0-9 (one gang) need more than pool /p's limit: cpu 10 > 8" in letter["reason"]


def test_one_task_among_alike_ones_larger_than_its_pool_is_refused_by_its_instance(admit, store) -> None:
    stage, out = admit
    text = (JOB.format(name="odd", count=6, gang=0, cpu=1)
            + "instanceconfig:\n  4:\n    resource: {cpulimit: 9, memlimitmb: 16}\n")
    stage.handle([command("odd", text)])
    assert store.get_job("odd") is None
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "instance 4 (one gang) need more than pool /p's limit: cpu 9 > 8" in letter["reason"], letter["reason"]


def test_a_non_preemptible_gang_beyond_the_reservation_is_refused_and_a_preemptible_one_may_borrow(admit,
                                                                                                   store) -> None:
    store.put_pool("/r", parse_pool_config(POOL.replace("reservation: 8, limit: 8", "reservation: 2, limit: 8"), "/r"))
    stage, out = admit
    stage.handle([command("steady", JOB.format(name="steady", count=3, gang=3, cpu=1), pool="/r")])
    [(_, _, _, letter)] = out.take("dead-letters")
    assert ("instances 0-2 (one gang) need more than pool /r's reservation, and non-preemptible tasks run only "
            "within it: cpu 3 > 2") in letter["reason"]
    borrower = JOB.format(name="borrower", count=3, gang=3, cpu=1).replace("sla: {", "sla: {preemptible: true, ")
    stage.handle([command("borrower", borrower, pool="/r")])
    assert out.take("dead-letters") == [] and store.get_job("borrower") is not None


def test_a_task_larger_than_every_host_is_refused_with_the_numbers(admit, store) -> None:
    stage, out = admit
    stage.handle([command("wide", JOB.format(name="wide", count=1, gang=0, cpu=6))])
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "fits on no host" in letter["reason"] and "the largest host has cpu 4" in letter["reason"]


def test_a_record_that_breaks_the_handler_is_dead_lettered_and_the_rest_of_its_batch_lives(admit, store,
                                                                                           monkeypatch) -> None:
    stage, out = admit
    import stages.admit.stage as admit_module

    real = admit_module.parse_job_config

    def fragile(text, *args):
        if "poison" in text:
            raise RecursionError("maximum recursion depth exceeded")
        return real(text, *args)

    monkeypatch.setattr(admit_module, "parse_job_config", fragile)
    batch = [command("g1", JOB.format(name="g1", count=1, gang=0, cpu=1)),
             command("bad", JOB.format(name="poison", count=1, gang=0, cpu=1)),
             command("g2", JOB.format(name="g2", count=1, gang=0, cpu=1))]
    assert handle_batch(stage, batch, out) == 1
    assert store.get_job("g1") and store.get_job("g2") and store.get_job("bad") is None
    [(_, _, _, letter)] = out.take("dead-letters")
    assert letter["offset"] == batch[1].offset and "RecursionError" in letter["reason"]
    assert {v["job_id"] for _, _, _, v in out.take("task-demand")} == {"g1", "g2"}


def test_a_status_for_an_unknown_task_is_a_dead_letter(admit) -> None:
    stage, out = admit
    stage.handle([record("task-status", "peloton.TaskStatus", {
        "event_id": "e", "task_id": "nobody-0-1", "job_id": "nobody", "instance": 0, "run_id": 1, "host_id": "",
        "state": "TASK_RUNNING", "reason": "", "message": "", "exit_code": None, "signal": None,
        "timestamp_ms": 1})])
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "unknown task 'nobody-0-1'" in letter["reason"]


def bundled(topic: str, key: str, schema: str, values: list[dict]) -> list[Record]:
    """The records as a stage's batch sends them (one bundle message) and the runtime reads them back."""
    emitter = RecordingEmitter()
    emitter.holding = True
    for v in values:
        emitter.emit(topic, key, schema, v)
    [(_, _, raw, _)] = emitter._messages()
    return decode_message(registry(), Catalogue()[topic], 0, 7, key.encode(), raw)


def test_a_batchs_statuses_of_one_job_go_as_one_bundle_and_each_moves_its_run(admit, store) -> None:
    stage, out = admit
    stage.handle([command("m", JOB.format(name="m", count=3, gang=0, cpu=1))])
    out.take()
    changes = [{"event_id": uuid.uuid4().hex, "task_id": f"m-{i}-1", "job_id": "m", "instance": i, "run_id": 1,
                "host_id": "h1", "state": state, "reason": "", "message": "", "exit_code": 0 if end else None,
                "signal": None, "timestamp_ms": 1, "health": ""}
               for i in range(3) for state, end in (("TASK_RUNNING", False), ("TASK_FINISHED", True))]
    records = bundled("task-status", "m", "peloton.TaskStatus", changes)
    assert [(r.schema, r.offset, r.index) for r in records] == [("peloton.TaskStatus", 7, i) for i in range(6)]
    assert [r.value for r in records] == changes
    stage.handle(records)
    assert [t.state for t in store.tasks_of_job("m")] == ["SUCCEEDED"] * 3
    assert store.get_job("m").state == "SUCCEEDED"
    # Statuses of runs no one knows, in one bundle: a letter for each, holding that status alone
    # (so it can be replayed as it is), from the bundle's place in the log.
    strays = [{**changes[0], "task_id": f"gone-{i}-1", "job_id": "gone", "instance": i} for i in range(2)]
    stage.handle(bundled("task-status", "gone", "peloton.TaskStatus", strays))
    letters = [letter for _, _, _, letter in out.take("dead-letters")]
    assert ["gone-0-1" in letters[0]["reason"], "gone-1-1" in letters[1]["reason"]] == [True, True]
    assert [registry().decode(letter["value"]) for letter in letters] == [("peloton.TaskStatus", v) for v in strays]
    assert {(letter["offset"], letter["partition"]) for letter in letters} == {(7, 0)}


def demand_of(stage: AdmitStage, out: RecordingEmitter, job_id: str, count: int, gang: int, cpu: float) -> list[Record]:
    stage.handle([command(job_id, JOB.format(name=job_id, count=count, gang=gang, cpu=cpu))])
    return [record("task-demand", schema, value, key="/p") for _, _, schema, value in out.take("task-demand")]


def test_a_blocked_head_gang_stops_blocking_smaller_gangs_after_the_bound(admit, store) -> None:
    admit_stage, admit_out = admit
    head = demand_of(admit_stage, admit_out, "head", count=6, gang=6, cpu=1)  # 6 of the pool's 8 cpu
    small = demand_of(admit_stage, admit_out, "small", count=2, gang=0, cpu=1)
    entitle = EntitleStage(store, usage=StaticView(), hosts=StaticView({"h1": host_state("h1", cpu=8)}))
    out = bound(entitle, head_of_line_timeout_s=0.3)
    # Something else already holds 4 cpu, so the 6-cpu head cannot fit; the 1-cpu gangs behind it could.
    store.add_allocations([Allocation("other-0-1", "/p", "other-0-1", 4, 0, 0, 0, 1)])
    entitle.on_assign([("task-demand", p) for p in range(4)])
    entitle.handle(head + small)
    assert out.take("admitted-gangs") == []  # the head blocks its pool (Peloton's rule)
    entitle._publish({"/p"})
    [(_, _, _, published)] = out.take("entitlements")
    assert published["waiting"][0]["job_id"] == "head"
    assert "waiting for room in its pool" in published["waiting"][0]["reason"]
    assert "cpu 6 (free 4 of 8)" in published["waiting"][0]["reason"]
    time.sleep(0.35)
    entitle._admit()
    admitted = [v["gang"]["job_id"] for _, _, _, v in out.take("admitted-gangs")]
    assert admitted == ["small", "small"]  # past the bound, the smaller gangs go first
    # The head waits in the store's queue, not in uncommitted offsets: a new owner finds it there.
    assert [q.gang["job_id"] for q in store.queued_gangs()] == ["head"]
    assert not entitle.held_offsets()


def progress_record(job_id: str, state: str, runs: list[tuple[int, int, str]]) -> Record:
    return record("task-status", "peloton.TaskProgress", {
        "event_id": uuid.uuid4().hex, "job_id": job_id, "state": state, "timestamp_ms": 5,
        "runs": [{"instance": i, "run_id": r, "host_id": h} for i, r, h in runs]}, key=job_id)


def test_the_steps_before_launch_show_in_the_task_and_its_history_once(admit, store) -> None:
    stage, out = admit
    stage.handle([command("p", JOB.format(name="p", count=2, gang=0, cpu=1))])
    out.take()
    stage.handle([progress_record("p", "READY", [(0, 1, ""), (1, 1, "")]),
                  progress_record("p", "PLACING", [(0, 1, "")])])
    stage.handle([progress_record("p", "PLACED", [(0, 1, "h1")])] * 2)  # delivered twice
    stage.handle([status_record("p-0-1", "TASK_STAGING")])
    # LAUNCHING after LAUNCHED (another producer's record came late), and a step of a deleted job
    stage.handle([progress_record("p", "LAUNCHING", [(0, 1, "h1")]), progress_record("gone", "READY", [(0, 1, "")])])
    assert out.take("dead-letters") == []
    tasks = {t.instance: t for t in store.tasks_of_job("p")}
    assert (tasks[0].state, tasks[0].host_id, tasks[1].state) == ("LAUNCHED", "h1", "READY")
    history = [e["state"] for e in store.task_events("p") if e["instance"] == 0]
    assert history[-4:] == ["READY", "PLACING", "PLACED", "LAUNCHED"]


def status_runs_record(job_id: str, state: str, runs: list[tuple[int, int]], exit_code: int | None = None,
                       health: str = "", with_starting: bool = False) -> Record:
    return record("task-status", "peloton.TaskStatusRuns", {
        "event_id": uuid.uuid4().hex, "job_id": job_id, "state": state, "exit_code": exit_code, "health": health,
        "with_starting": with_starting, "timestamp_ms": 100,
        "runs": [{"instance": i, "run_id": r, "host_id": "h1", "offset_ms": i} for i, r in runs]},
        key=job_id)


def test_a_status_of_many_runs_moves_each_and_dead_letters_only_a_run_it_cannot_use(admit, store) -> None:
    stage, out = admit
    stage.handle([command("m", JOB.format(name="m", count=3, gang=0, cpu=1))])
    out.take()
    stage.handle([progress_record("m", "LAUNCHING", [(0, 1, "h1"), (1, 1, "h1"), (2, 1, "h1")])])
    stage.handle([status_runs_record("m", "TASK_RUNNING", [(0, 1), (1, 1), (2, 1), (7, 1)], health="DISABLED")])
    assert [t.state for t in sorted(store.tasks_of_job("m"), key=lambda t: t.instance)] == ["RUNNING"] * 3
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "no instance 7" in letter["reason"]
    schema, alone = registry().decode(letter["value"])  # the one run's status, as a TaskStatus
    assert (schema, alone["task_id"], alone["state"], alone["timestamp_ms"]) == ("peloton.TaskStatus", "m-7-1",
                                                                                 "TASK_RUNNING", 107)
    stage.handle([status_runs_record("m", "TASK_FINISHED", [(0, 1), (1, 1), (2, 1)], exit_code=0)])
    assert store.get_job("m").state == "SUCCEEDED"
    releases = [v["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.TaskRelease"]
    assert sorted(releases) == ["m-0-1", "m-1-1", "m-2-1"]
    history = [(e["state"], e["timestamp_ms"]) for e in store.task_events("m") if e["instance"] == 2]
    assert history[-2:] == [("RUNNING", 102), ("SUCCEEDED", 102)]


def test_a_host_managers_launching_leaves_the_run_launched_with_both_steps_in_its_history(admit, store) -> None:
    stage, out = admit
    stage.handle([command("l", JOB.format(name="l", count=1, gang=0, cpu=1))])
    out.take()
    stage.handle([progress_record("l", "READY", [(0, 1, "")]), progress_record("l", "PLACED", [(0, 1, "h1")])])
    stage.handle([progress_record("l", "LAUNCHING", [(0, 1, "h1")])])
    [task] = store.tasks_of_job("l")
    assert (task.state, task.host_id) == ("LAUNCHED", "h1")
    stage.handle([progress_record("l", "LAUNCHING", [(0, 1, "h1")]), status_record("l-0-1", "TASK_STAGING")])  # again
    history = [(e["state"], e["host_id"]) for e in store.task_events("l")]
    assert history[-3:] == [("PLACED", "h1"), ("LAUNCHING", "h1"), ("LAUNCHED", "h1")]
    stage.handle([status_record("l-0-1", "TASK_RUNNING")])
    assert store.tasks_of_job("l")[0].state == "RUNNING"


def test_a_running_record_with_its_starting_leaves_both_steps_in_each_runs_history(admit, store) -> None:
    stage, out = admit
    stage.handle([command("w", JOB.format(name="w", count=2, gang=0, cpu=1))])
    out.take()
    stage.handle([progress_record("w", "LAUNCHING", [(0, 1, "h1"), (1, 1, "h1")])])
    stage.handle([status_runs_record("w", "TASK_RUNNING", [(0, 1), (1, 1)], health="DISABLED", with_starting=True)])
    assert out.take("dead-letters") == []
    assert [t.state for t in store.tasks_of_job("w")] == ["RUNNING", "RUNNING"]
    history = [(e["state"], e["timestamp_ms"]) for e in store.task_events("w") if e["instance"] == 1]
    assert history[-2:] == [("STARTING", 101), ("RUNNING", 101)]


def test_a_failed_task_runs_again_away_from_the_host_it_failed_on(admit, store) -> None:
    stage, out = admit
    retried = JOB.format(name="f", count=1, gang=0, cpu=1) + "  restartpolicy: {maxfailures: 3}\n"
    stage.handle([command("f", retried)])
    out.take()
    failed = status_record("f-0-1", "TASK_FAILED")
    failed.value["host_id"] = "h1"
    stage.handle([failed])
    [again] = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert again["tasks"][0]["task_id"] == "f-0-2" and again["avoid_hosts"] == ["h1"]


def test_a_batch_of_failed_runs_reads_their_specs_to_run_them_again_in_one_call(admit, store) -> None:
    """The specs of the runs a batch ends are read once for all of them, not once per run."""
    stage, out = admit
    stage.handle([command("f", JOB.format(name="f", count=5, gang=0, cpu=0.5) + "  restartpolicy: {maxfailures: 3}\n")])
    out.take()
    reads = []
    by_instance = store.tasks_by_instance

    def counted(keys, *args, **kwargs):
        if kwargs.get("spec", True):
            reads.append(len(keys))
        return by_instance(keys, *args, **kwargs)

    store.tasks_by_instance = counted
    stage.handle([status_record(f"f-{i}-1", "TASK_FAILED") for i in range(5)])
    assert reads == [5]
    assert sorted(t["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"
                  for t in v["tasks"]) == [f"f-{i}-2" for i in range(5)]


def test_tasks_of_a_gang_sent_back_go_back_as_one_gang_under_a_new_id(admit, store) -> None:
    stage, out = admit
    stage.handle([command("g", JOB.format(name="g", count=3, gang=3, cpu=1))])
    [(_, _, _, first)] = out.take("task-demand")
    # placement refused two of the gang's tasks together, then the third later
    stage.handle([status_record("g-0-1", "TASK_DROPPED"), status_record("g-1-1", "TASK_DROPPED")])
    demand = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    stage.handle([status_record("g-2-1", "TASK_DROPPED")])
    later = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert [[t["task_id"] for t in g["tasks"]] for g in demand] == [["g-0-1", "g-1-1"]]
    assert [[t["task_id"] for t in g["tasks"]] for g in later] == [["g-2-1"]]
    ids = {first["gang_id"], demand[0]["gang_id"], later[0]["gang_id"]}
    assert len(ids) == 3, "a gang sent back must not look like a repeat of what entitle and place have"
    assert all(i.split("~")[0] == first["gang_id"] for i in ids)
