"""Stages without a broker: records fed by hand, views given, output read from a recording emitter
(the store is a real SQLite file). The integration tests prove the wiring; these the decisions."""

from __future__ import annotations

import sqlite3
import time
import uuid

import pytest

from peloton.config import Settings
from peloton.model.events import statuses_of_runs
from peloton.model.pool import parse_pool_config
from peloton.runtime import Record, RecordingEmitter, Stage, StaticView, decode_message, handle_batch
from peloton.serde import registry
from peloton.store import Allocation, open_store
from peloton.topics import Catalogue, partition_for
from stages.admit.stage import AdmitStage
from stages.entitle.stage import EntitleStage
from stages.launch.stage import LaunchStage
from stages.place.stage import PlaceStage

POOL = """
resources:
- {kind: cpu, reservation: 8, limit: 8, share: 1}
- {kind: memory, reservation: 4096, limit: 4096, share: 1}
- {kind: disk, reservation: 1000, limit: 1000, share: 1}
"""

JOB = """
name: {name}
instancecount: {count}
sla: {{minimumRunningInstances: {gang}}}
defaultconfig:
  resource: {{cpulimit: {cpu}, memlimitmb: 16}}
  command: {{shell: true, value: 'true'}}
"""

_offsets: dict[tuple[str, int], int] = {}


def record(topic: str, schema: str, value: dict, key: str = "k", partition: int = 0) -> Record:
    """A record as the runtime would decode it, with its bytes, at the next offset."""
    tp = (topic, partition)
    _offsets[tp] = _offsets.get(tp, -1) + 1
    raw = registry().encode(schema, value)
    _, value = registry().decode(raw)  # with the defaults of the fields not given
    return Record(topic, partition, _offsets[tp], key, schema, value, key.encode(), raw)


def command(job_id: str, config: str, pool: str = "/p") -> Record:
    return record("job-commands", "peloton.JobCommand", {
        "command_id": uuid.uuid4().hex, "kind": "CREATE", "job_id": job_id, "pool": pool, "config": config,
        "requested_by": "test", "timestamp_ms": 1}, key=job_id)


def host_state(host_id: str, cpu: float) -> dict:
    return {"host_id": host_id, "shard": 0, "driver": "sim", "state": "UP",
            "capacity": {"cpu": cpu, "mem_mb": 65536.0, "disk_mb": 100000.0, "gpu": 0.0},
            "allocated": {"cpu": 0.0, "mem_mb": 0.0, "disk_mb": 0.0, "gpu": 0.0}, "task_count": 0,
            "labels": {"hostname": host_id, "driver": "sim"}, "applied_placements": [], "updated_ms": 1,
            "task_labels": [], "job_tasks": {}, "used_ports": [], "port_ranges": []}


def bound(stage: Stage, **settings) -> RecordingEmitter:
    out = RecordingEmitter(stage.name)
    stage.bind(out, Settings(**settings), Catalogue())
    return out


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path / "peloton.db")
    s.put_pool("/p", parse_pool_config(POOL, "/p"))
    yield s
    s.close()


@pytest.fixture
def admit(store):
    stage = AdmitStage(store, hosts=StaticView({"h1": host_state("h1", cpu=4)}))
    return stage, bound(stage)


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


def test_place_refuses_a_gang_whose_constraint_it_cannot_read_and_fails_its_tasks() -> None:
    stage = PlaceStage(host_state=StaticView({"h1": host_state("h1", cpu=4)}))
    out = bound(stage)
    task = {"task_id": "j-0-1", "job_id": "j", "instance": 0, "run_id": 1,
            "resources": {"cpu": 1.0, "mem_mb": 1.0, "disk_mb": 0.0, "gpu": 0.0}, "dynamic_ports": 0,
            "command": "true", "shell": True, "arguments": [], "environment": {}, "labels": {},
            "constraint_json": '{"type": "LABEL", "labelconstraint": {"requirement": "abc"}}',
            "kill_grace_seconds": 1.0, "controller": False}
    gang = {"gang_id": "j-0-1", "job_id": "j", "pool": "/p", "priority": 0, "preemptible": True,
            "placement_strategy": "PACK_HOST", "tasks": [task], "created_ms": 1}
    stage.handle([record("admitted-gangs", "peloton.AdmittedGang", {"gang": gang, "admitted_ms": 1}, key="/p")])
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "requirement" in letter["reason"]
    [(_, key, _, status)] = out.take("task-status")
    assert (key, status["state"], status["task_id"]) == ("j", "TASK_ERROR", "j-0-1")
    assert not stage.waiting and not stage.held_offsets()


def test_place_spreads_a_packed_burst_over_the_host_shards_as_host_state_arrives_grouped_by_shard() -> None:
    # 4 shards of 50 hosts, read shard after shard (as host state's partitions come); each host takes 2 tasks
    view = StaticView({})
    for shard in range(4):
        for i in range(50):
            view.put(f"h{i:02d}-{shard}", {**host_state(f"h{i:02d}-{shard}", cpu=2), "shard": shard})
    stage = PlaceStage(host_state=view)
    out = bound(stage)
    spec = {"job_id": "j", "run_id": 1, "resources": {"cpu": 1.0, "mem_mb": 1.0, "disk_mb": 0.0, "gpu": 0.0},
            "dynamic_ports": 0, "command": "true", "shell": True, "arguments": [], "environment": {}, "labels": {},
            "constraint_json": None, "kill_grace_seconds": 1.0, "controller": False}
    stage.handle([record("admitted-gangs", "peloton.AdmittedGang", {"gang": {
        "gang_id": f"j-{i}-1", "job_id": "j", "pool": "/p", "priority": 0, "preemptible": True,
        "placement_strategy": "PACK_HOST", "tasks": [{**spec, "task_id": f"j-{i}-1", "instance": i}], "created_ms": 1},
        "admitted_ms": 1}, key="/p") for i in range(16)])
    stage.tick(1.0)
    placements = [p for _, _, _, p in out.take("placements")]
    assert len({a["host_id"] for p in placements for a in p["assignments"]}) == 8  # PACK: full hosts, one by one
    assert sorted(p["shard"] for p in placements).count(0) == 4  # every shard's host manager gets its part
    assert {p["shard"] for p in placements} == {0, 1, 2, 3}


def test_place_sends_a_gang_back_to_its_pool_with_the_reason_after_a_placement_cycle() -> None:
    stage = PlaceStage(host_state=StaticView({"h1": host_state("h1", cpu=4)}))
    out = bound(stage, placement_attempts=2, placement_backoff_s=0.0)
    task = {"task_id": "j-0-1", "job_id": "j", "instance": 0, "run_id": 1,
            "resources": {"cpu": 8.0, "mem_mb": 1.0, "disk_mb": 0.0, "gpu": 0.0}, "dynamic_ports": 0,
            "command": "true", "shell": True, "arguments": [], "environment": {}, "labels": {},
            "constraint_json": None, "kill_grace_seconds": 1.0, "controller": False}
    gang = {"gang_id": "j-0-1", "job_id": "j", "pool": "/p", "priority": 0, "preemptible": True,
            "placement_strategy": "PACK_HOST", "tasks": [task], "created_ms": 1}
    stage.handle([record("admitted-gangs", "peloton.AdmittedGang", {"gang": gang, "admitted_ms": 1}, key="/p")])
    assert out.take("task-status") == []  # PLACING only once it has to wait for hosts
    stage.tick(1.0)
    [(_, _, _, placing)] = out.take("task-status", "peloton.TaskProgress")  # one try: it waits
    assert (placing["state"], placing["runs"]) == ("PLACING", [{"instance": 0, "run_id": 1, "host_id": ""}])
    assert stage.held_offsets()
    stage.tick(2.0)
    [(_, key, _, status)] = out.take("task-status")
    assert (status["state"], status["reason"]) == ("TASK_DROPPED", "REASON_NO_HOST")
    assert status["message"] == "task j-0-1 fits on none of 1 host: no room for 8 cpu on 1"
    assert not stage.waiting and not stage.held_offsets() and out.take("placements") == []


def test_place_says_placed_for_a_gang_that_waited_for_hosts_before_its_placement() -> None:
    hosts = StaticView({"h1": host_state("h1", cpu=4)})
    stage = PlaceStage(host_state=hosts)
    out = bound(stage, placement_attempts=5, placement_backoff_s=0.0)
    big = {**one_task_gang("w-0-1"), "tasks": [{**one_task_gang("w-0-1")["tasks"][0],
                                                 "resources": {"cpu": 6.0, "mem_mb": 1.0, "disk_mb": 0.0, "gpu": 0.0}}]}
    stage.handle([record("admitted-gangs", "peloton.AdmittedGang", {"gang": big, "admitted_ms": 1}, key="/p")])
    stage.tick(1.0)
    assert [v["state"] for _, _, _, v in out.take("task-status")] == ["PLACING"]
    hosts.put("h2", host_state("h2", cpu=8))  # a host with room comes
    stage.tick(2.0)
    sent = [(topic, v.get("state"), v.get("runs")) for topic, _, _, v in out.take()]
    assert sent == [("task-status", "PLACED", [{"instance": 0, "run_id": 1, "host_id": "h2"}]),
                    ("placements", None, None)]  # PLACED ends the wait and its reason, before the placement


def status_record(task_id: str, state: str, reason: str = "", host: str = "") -> Record:
    job_id, instance, run = task_id.rsplit("-", 2)
    return record("task-status", "peloton.TaskStatus", {
        "event_id": uuid.uuid4().hex, "task_id": task_id, "job_id": job_id, "instance": int(instance),
        "run_id": int(run), "host_id": host, "state": state, "reason": reason, "message": "no room",
        "exit_code": None, "signal": None, "timestamp_ms": 1}, key=job_id)


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


def test_launch_sends_a_ticks_statuses_as_one_record_per_job_and_status(store) -> None:
    stage = LaunchStage(store)
    out = bound(stage, hosts="sim:1:cpu=8", sim_task_seconds=0)
    stage.on_assign([("placements", p) for p in range(4)])
    out.take()
    stage.handle([placement_of(one_task_gang(f"s-{i}-1")) for i in range(3)])
    stage.tick(time.monotonic())
    stage.tick(time.monotonic())
    sent = [(schema, v["state"], v["with_starting"], sorted(r["instance"] for r in v["runs"]))
            for _, _, schema, v in out.take("task-status") if schema != "peloton.TaskProgress"]
    # a start's STARTING and RUNNING, reported at one instant, in one record (statuses_of_runs reads both)
    assert sent == [("peloton.TaskStatusRuns", "TASK_RUNNING", True, [0, 1, 2]),
                    ("peloton.TaskStatusRuns", "TASK_FINISHED", False, [0, 1, 2])]


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


def one_task_gang(gang_id: str, pool: str = "/p", cpu: float = 1.0, priority: int = 0) -> dict:
    job_id, instance, run = gang_id.rsplit("-", 2)
    task = {"task_id": gang_id, "job_id": job_id, "instance": int(instance), "run_id": int(run),
            "resources": {"cpu": cpu, "mem_mb": 1.0, "disk_mb": 0.0, "gpu": 0.0}, "dynamic_ports": 0,
            "command": "true", "shell": True, "arguments": [], "environment": {}, "labels": {},
            "constraint_json": None, "kill_grace_seconds": 1.0, "controller": False}
    return {"gang_id": gang_id, "job_id": job_id, "pool": pool, "priority": priority, "preemptible": True,
            "revocable": False, "placement_strategy": "PACK_HOST", "tasks": [task], "created_ms": 1}


def entitle_with(store, partitions=range(4), on_topic=(),
                 **settings) -> tuple[EntitleStage, RecordingEmitter, StaticView]:
    """An entitle instance owning `partitions`; `on_topic`: the admitted-gangs records (or None:
    unreadable) its predecessor's admissions are read back from."""
    usage = StaticView()
    stage = EntitleStage(store, usage=usage, hosts=StaticView({"h1": host_state("h1", cpu=8)}))
    stage.read_back = lambda *_args: None if on_topic is None else list(on_topic)
    out = bound(stage, **settings)
    stage.on_assign([("task-demand", p) for p in partitions])
    return stage, out, usage


def test_entitle_lends_an_idle_pools_share_and_preempts_it_back_after_the_sustained_periods(store) -> None:
    store.put_pool("/q", parse_pool_config(POOL.replace("reservation: 8, limit: 8", "reservation: 4, limit: 8"), "/q"))
    store.put_pool("/p", parse_pool_config(POOL.replace("reservation: 8, limit: 8", "reservation: 4, limit: 8"), "/p"))
    # This instance owns /p (partition 2); another owns /q (partition 3) and publishes its usage.
    assert partition_for("/p", 4) != partition_for("/q", 4)
    stage, out, usage = entitle_with(store, [partition_for("/p", 4)], preemption_sustained_periods=2)
    stage.handle([record("task-demand", "peloton.GangDemand", one_task_gang(f"a-{i}-1"), key="/p") for i in range(8)])
    assert len(out.take("admitted-gangs")) == 8  # /q is idle: /p borrows its 4 cpu
    assert out.take("task-status", "peloton.TaskProgress") == []  # admitted by their own batch: no READY
    # /q wants its share now (its owner, another instance, publishes its demand)
    usage.put("/q", {"pool": "/q", **{k: {"cpu": 0.0, "mem_mb": 0.0, "disk_mb": 0.0, "gpu": 0.0} for k in (
        "entitlement", "allocation", "non_slack_allocation", "slack_allocation", "slack_demand")},
        "demand": {"cpu": 4.0, "mem_mb": 4.0, "disk_mb": 0.0, "gpu": 0.0}})
    stage._admit()  # recomputes the tree: the view changed
    assert stage.ledgers["/p"].entitlement.cpu == 4
    stage._reclaim()
    assert out.take("placements") == []  # one period over: not sustained yet
    stage._reclaim()
    kills = [v for _, _, schema, v in out.take("placements") if schema == "peloton.TaskKill"]
    assert len(kills) == 4 * 4  # 4 victims, each on every host shard's partition
    assert len({k["task_id"] for k in kills}) == 4 and {k["reason"] for k in kills} == {"PREEMPTED"}
    statuses = [v for _, _, _, v in out.take("task-status", "peloton.TaskStatus")]
    assert {(s["state"], s["reason"]) for s in statuses} == {("TASK_KILLING", "PREEMPTED")}
    stage._reclaim()
    assert out.take("placements") == []  # being preempted: not chosen again


def test_entitle_says_ready_only_for_the_gangs_that_waited_for_admission(store) -> None:
    stage, out, _ = entitle_with(store)  # /p: 8 cpu
    stage.handle([record("task-demand", "peloton.GangDemand", one_task_gang(f"r-{i}-1", cpu=2.0), key="/p")
                  for i in range(6)])
    assert len(out.take("admitted-gangs")) == 4  # the pool is full: two wait, queued in the store
    assert out.take("task-status", "peloton.TaskProgress") == []  # admitted at once: they go on from PENDING
    assert len(store.queued_gangs(["/p"])) == 2
    stage.handle([record("task-demand", "peloton.TaskRelease", {
        "task_id": f"r-{i}-1", "job_id": "r", "pool": "/p", "reason": "TASK_FINISHED", "timestamp_ms": 2},
        key="/p") for i in range(2)])
    assert len(out.take("admitted-gangs")) == 2
    [(_, _, _, ready)] = out.take("task-status", "peloton.TaskProgress")  # one record for the job's 2 runs
    assert (ready["state"], sorted(r["instance"] for r in ready["runs"])) == ("READY", [4, 5])


def test_entitle_admits_a_whole_batch_of_a_pool_at_once_without_queueing_it_in_the_store(store) -> None:
    stage, out, _ = entitle_with(store)
    gangs = [record("task-demand", "peloton.GangDemand", one_task_gang(f"w-{i}-1", cpu=0.005), key="/p")
             for i in range(1500)]  # more than the 1,000 a pool once admitted per turn
    stage.handle(gangs)
    assert len(out.take("admitted-gangs")) == 1500
    assert store.queued_gangs(["/p"]) == [] and len(stage.queues["/p"]) == 0


def test_a_new_entitle_owner_rebuilds_queues_and_charges_from_the_store(store) -> None:
    first, out, _ = entitle_with(store)
    gangs = [record("task-demand", "peloton.GangDemand", one_task_gang(f"b-{i}-1", cpu=3), key="/p") for i in range(4)]
    first.handle(gangs)
    assert len(out.take("admitted-gangs")) == 2  # 6 of the pool's 8 cpu; two wait
    first.tick(time.monotonic())
    first.tick(time.monotonic())  # its admissions were flushed after the first tick: forgotten
    second, out2, _ = entitle_with(store)  # the partition moved: no topic is read again
    assert len(second.queues["/p"]) == 2 and second.ledgers["/p"].held.total.cpu == 6
    second.handle([record("task-demand", "peloton.TaskRelease", {
        "task_id": "b-0-1", "job_id": "b", "pool": "/p", "reason": "TASK_FINISHED", "timestamp_ms": 1}, key="/p")])
    assert [v["gang"]["gang_id"] for _, _, _, v in out2.take("admitted-gangs")] == ["b-2-1"]
    # the first instance, not told yet that it lost the pool, cannot admit what the second took
    first.ledgers["/p"].release("b-1-1")
    first._admit()  # it tries b-2-1, finds it taken and drops it from its queue
    first._admit()
    assert [v["gang"]["gang_id"] for _, _, _, v in out.take("admitted-gangs")] == ["b-3-1"]
    assert sorted(a.task_id for a in store.allocations()) == ["b-1-1", "b-2-1", "b-3-1"]
    assert store.queued_gangs() == []


def waited_then_admitted(stage: EntitleStage, out: RecordingEmitter, count: int, prefix: str) -> list[dict]:
    """Gangs that waited in the store's queue and were admitted by a later batch (two 3-cpu gangs
    fill the pool's 8 cpu first, and end), as the admissions of that batch sent them."""
    stage.handle([record("task-demand", "peloton.GangDemand", one_task_gang(f"{prefix}-{i}-1", cpu=3), key="/p")
                  for i in range(2 + count)])
    assert len(out.take("admitted-gangs")) == 2
    assert sorted(q.gang_id for q in stage.store.queued_gangs()) == [f"{prefix}-{i}-1" for i in range(2, 2 + count)]
    stage.handle([record("task-demand", "peloton.TaskRelease", {
        "task_id": f"{prefix}-{i}-1", "job_id": prefix, "pool": "/p", "reason": "TASK_FINISHED", "timestamp_ms": 1},
        key="/p") for i in range(2)])
    return [v for _, _, _, v in out.take("admitted-gangs")]


def test_a_gang_admitted_by_the_batch_that_brought_it_is_never_queued_in_the_store(store) -> None:
    first, out, _ = entitle_with(store)
    demands = [record("task-demand", "peloton.GangDemand", one_task_gang(f"u-{i}-1", cpu=3), key="/p")
               for i in range(2)]
    first.handle(demands)
    assert len(out.take("admitted-gangs")) == 2
    assert store.queued_gangs() == [] and store.unsent_admissions() == []  # no row written, marked, deleted
    assert sorted(a.task_id for a in store.allocations()) == ["u-0-1", "u-1-1"]
    # ... and the process dies before its transaction commits: the next owner reads the demand
    # again, finds the runs held, and sends their admissions again, charged once.
    second, out2, _ = entitle_with(store)
    assert out2.take("admitted-gangs") == []
    second.handle(demands)
    assert sorted(v["gang"]["gang_id"] for _, _, _, v in out2.take("admitted-gangs")) == ["u-0-1", "u-1-1"]
    assert second.ledgers["/p"].held.total.cpu == 6


def test_a_batch_that_fails_leaves_none_of_its_gangs_queued(store) -> None:
    stage, out, _ = entitle_with(store)
    demands = [record("task-demand", "peloton.GangDemand", one_task_gang(f"f-{i}-1", cpu=3), key="/p")
               for i in range(3)]
    real = store.queue_gangs

    def away(rows):
        raise sqlite3.OperationalError("database is locked")
    store.queue_gangs = away  # the third gang waits, and the store is away when it is to be queued
    with pytest.raises(sqlite3.OperationalError):
        handle_batch(stage, demands, out)  # (its output discarded, as the runtime does)
    assert out.take("admitted-gangs") == []
    # The two admitted are stored and charged; the third is not queued, here or in the store.
    assert len(stage.queues["/p"]) == 0 and stage.ledgers["/p"].held.total.cpu == 6
    store.queue_gangs = real
    handle_batch(stage, demands, out)  # the batch again: two found held (sent again), the third queued
    assert sorted(v["gang"]["gang_id"] for _, _, _, v in out.take("admitted-gangs")) == ["f-0-1", "f-1-1"]
    assert [q.gang_id for q in store.queued_gangs()] == ["f-2-1"] and len(stage.queues["/p"]) == 1


def test_admissions_stored_but_maybe_never_sent_are_sent_again_by_the_next_owner(store) -> None:
    first, out, _ = entitle_with(store)
    sent = waited_then_admitted(first, out, 1, "u")
    assert [v["gang"]["gang_id"] for v in sent] == ["u-2-1"]  # ... and the process dies before the broker has it
    second, out2, _ = entitle_with(store)
    assert [v["gang"]["gang_id"] for _, _, _, v in out2.take("admitted-gangs")] == ["u-2-1"]
    assert second.ledgers["/p"].held.total.cpu == 3  # charged once, not again
    second.tick(time.monotonic())
    second.tick(time.monotonic())
    assert store.unsent_admissions() == [] and store.queued_gangs() == []


@pytest.mark.parametrize("readable", [True, False])
def test_a_new_owner_sends_again_only_the_admissions_the_topic_does_not_hold(store, readable) -> None:
    first, out, _ = entitle_with(store)
    admitted = waited_then_admitted(first, out, 2, "u")
    sent = [("peloton.AdmittedGang", v) for v in admitted if v["gang"]["gang_id"] == "u-2-1"]
    # the transaction holding u-2-1 committed; the process died before the store heard it went
    second, out2, _ = entitle_with(store, on_topic=sent if readable else None)
    again = sorted(v["gang"]["gang_id"] for _, _, _, v in out2.take("admitted-gangs"))
    assert again == (["u-3-1"] if readable else ["u-2-1", "u-3-1"])
    assert [q.gang_id for q in store.unsent_admissions()] == (["u-3-1"] if readable else ["u-2-1", "u-3-1"])


def placement_of(gang: dict, host_id: str = "sim-0") -> Record:
    return record("placements", "peloton.Placement", {
        "placement_id": uuid.uuid4().hex, "gang_id": gang["gang_id"], "pool": gang["pool"], "shard": 0,
        "assignments": [{"host_id": host_id, "task": t} for t in gang["tasks"]], "placed_ms": 1})


def test_place_and_launch_tell_the_job_manager_each_step_before_the_next_can_happen(store) -> None:
    place = PlaceStage(host_state=StaticView({"h1": host_state("h1", cpu=4)}))
    placed = bound(place)
    place.handle([record("admitted-gangs", "peloton.AdmittedGang", {"gang": one_task_gang("s-0-1"), "admitted_ms": 1})])
    place.tick(time.monotonic())
    sent = [(topic, schema, v.get("state")) for topic, _, schema, v in placed.take()]
    # placed in the turn that took it: no PLACING, no PLACED (it never waited for hosts); the host
    # manager's LAUNCHING names the host
    assert sent == [("placements", "peloton.Placement", None)]
    launch = LaunchStage(store)
    launched = bound(launch, hosts="sim:1:cpu=8", sim_task_seconds=600)
    launch.on_assign([("placements", p) for p in range(4)])
    launched.take()
    launch.handle([placement_of(one_task_gang("s-0-1"))])
    steps = [(v["state"], v.get("runs")) for _, _, _, v in launched.take("task-status")]
    # LAUNCHING says the run is launched: no TASK_STAGING besides (frameworks never see it in Mesos)
    assert steps[0] == ("LAUNCHING", [{"instance": 0, "run_id": 1, "host_id": "sim-0"}])
    assert "TASK_STAGING" not in [state for state, _ in steps]


def statuses_sent(sent: list[tuple]) -> list[dict]:
    """The TaskStatus records among what was sent on task-status, each run of a TaskStatusRuns as its own."""
    out = []
    for _, _, schema, v in sent:
        if schema == "peloton.TaskStatus":
            out.append(v)
        elif schema == "peloton.TaskStatusRuns":
            out.extend(statuses_of_runs(v))
    return out


def kill_of(task_id: str) -> Record:
    job_id, instance, run = task_id.rsplit("-", 2)
    return record("placements", "peloton.TaskKill", {
        "kill_id": uuid.uuid4().hex, "task_id": task_id, "job_id": job_id, "instance": int(instance),
        "run_id": int(run), "reason": "PREEMPTED", "message": "preempted: test", "timestamp_ms": 1})


def test_launch_kills_a_running_run_and_keeps_an_unlaunched_one_from_ever_starting(store) -> None:
    stage = LaunchStage(store)
    out = bound(stage, hosts="sim:1:cpu=8", sim_task_seconds=600)
    stage.on_assign([("placements", p) for p in range(4)])
    out.take()
    running, early = one_task_gang("r-0-1"), one_task_gang("e-0-1")
    # one batch, in order: a placement, a kill of it, a kill of a run not placed yet, its placement
    stage.handle([placement_of(running), kill_of("r-0-1"), kill_of("e-0-1"), placement_of(early)])
    stage.tick(time.monotonic())
    statuses = [(v["task_id"], v["state"], v["reason"]) for v in statuses_sent(out.take("task-status"))]
    assert ("r-0-1", "TASK_KILLED", "PREEMPTED") in statuses
    assert ("e-0-1", "TASK_KILLED", "PREEMPTED") in statuses
    assert not [s for s in statuses if s[0] == "e-0-1" and s[1] != "TASK_KILLED"], "the killed run started"
    assert store.launch_counts("e") == {0: 1}  # its one claim is the kill's: a later placement is a repeat
    assert stage.running == {}
    # Another shard's host manager sees the same kill: the run is claimed already, it does nothing.
    other = LaunchStage(store)
    other_out = bound(other, hosts="sim:1:cpu=8", sim_task_seconds=600)
    other._kills([kill_of("r-0-1"), kill_of("e-0-1")])
    assert other_out.take("task-status") == []


def test_launch_forgets_runs_that_ended_longer_ago_than_their_placements_are_kept(store) -> None:
    from peloton.runtime.record import now_ms
    from peloton.store import CLAIMS_KEPT_MS, Launch

    stage = LaunchStage(store)
    bound(stage, hosts="sim:1:cpu=8", sim_task_seconds=600)
    store.claim_launches([Launch(t, "x", i, 1, "sim-0", 1, 1, 1, 0, 5) for i, t in enumerate(("old", "new"))])
    store.end_launches(["old"], 1_000)
    store.end_launches(["new"], now_ms() - CLAIMS_KEPT_MS + 60_000)
    stage.tick(10.0)  # the first tick sweeps, the next ones an hour later
    assert store.launch_counts("x") == {1: 1}
    store.claim_launches([Launch("old2", "x", 2, 1, "sim-0", 1, 1, 1, 0, 5, 1_000)])
    stage.tick(20.0)
    assert store.launch_counts("x") == {1: 1, 2: 1}
    stage.tick(10.0 + stage.claim_sweep.every)
    assert store.launch_counts("x") == {1: 1}


def control(kind: str, job_id: str, instances: str | None = None, command_id: str | None = None) -> Record:
    return record("job-commands", "peloton.JobCommand", {
        "command_id": command_id or uuid.uuid4().hex, "kind": kind, "job_id": job_id, "pool": "/p", "config": None,
        "instances": instances, "requested_by": "tester", "timestamp_ms": 1}, key=job_id)


def test_stop_kills_every_live_run_wherever_it_is_and_the_job_ends_killed(admit, store) -> None:
    stage, out = admit
    stage.handle([command("s", JOB.format(name="s", count=3, gang=0, cpu=1))])
    out.take()
    stage.handle([status_record("s-0-1", "TASK_RUNNING"), status_record("s-1-1", "TASK_FINISHED")])
    out.take()
    stage.handle([control("STOP", "s")])
    kills = [v for _, _, schema, v in out.take("placements") if schema == "peloton.TaskKill"]
    assert sorted({k["task_id"] for k in kills}) == ["s-0-1", "s-2-1"]  # the finished one is left alone
    assert len(kills) == 2 * 4 and {k["reason"] for k in kills} == {"STOPPED"}  # every host shard
    assert store.get_job("s").state == "KILLING"
    stage.handle([status_record("s-0-1", "TASK_KILLED", "STOPPED"), status_record("s-2-1", "TASK_KILLED", "STOPPED")])
    assert store.get_job("s").state == "KILLED"
    releases = [v["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.TaskRelease"]
    assert sorted(releases) == ["s-0-1", "s-2-1"]
    states = [(e["run_id"], e["state"], e["reason"]) for e in store.task_events("s") if e["instance"] == 0]
    assert states == [(1, "RUNNING", ""), (1, "KILLING", "STOPPED"), (1, "KILLED", "STOPPED")]


def test_start_runs_stopped_instances_again_and_a_command_delivered_twice_acts_once(admit, store) -> None:
    stage, out = admit
    stage.handle([command("r", JOB.format(name="r", count=4, gang=0, cpu=1))])
    stage.handle([control("STOP", "r", "1-2")])
    stage.handle([status_record("r-1-1", "TASK_KILLED", "STOPPED"), status_record("r-2-1", "TASK_KILLED", "STOPPED")])
    out.take()
    start = control("START", "r", "0-3", command_id="start-once")
    stage.handle([start])
    demand = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert sorted(t["task_id"] for g in demand for t in g["tasks"]) == ["r-1-2", "r-2-2"]  # new runs
    stage.handle([control("START", "r", "0-3", command_id="start-once")])  # redelivered
    assert out.take("task-demand") == []
    assert {t.instance: (t.run_id, t.state) for t in store.tasks_of_job("r")} == {
        0: (1, "PENDING"), 1: (2, "PENDING"), 2: (2, "PENDING"), 3: (1, "PENDING")}


def test_bad_control_commands_are_dead_letters_with_the_reason(admit, store) -> None:
    stage, out = admit
    stage.handle([command("d", JOB.format(name="d", count=2, gang=0, cpu=1))])
    out.take()
    stage.handle([control("STOP", "nobody"), control("STOP", "d", "0-5"), control("DELETE", "d"),
                  control("FROB", "d"), control("PAUSE", "d")])
    reasons = [v["reason"] for _, _, _, v in out.take("dead-letters")]
    assert reasons[0] == "no job 'nobody'"
    assert "instances '0-5': the job has instances 0-1" in reasons[1]
    assert reasons[2] == "job d is PENDING: only a terminal job is deleted (stop it first)"
    assert "unknown job command kind 'FROB'" in reasons[3]
    assert reasons[4] == "PAUSE names no update (update_id: the id `pelotonctl update list JOB` shows)"
    stage.handle([control("STOP", "d")])
    stage.handle([status_record("d-0-1", "TASK_KILLED", "STOPPED"), status_record("d-1-1", "TASK_KILLED", "STOPPED")])
    out.take()
    stage.handle([control("START", "d")])  # Peloton's rule: a terminated batch job stays ended
    [refused] = [v["reason"] for _, _, _, v in out.take("dead-letters")]
    assert refused == ("job d is KILLED: the tasks of a terminated batch job are not started again "
                       "(create the job again)")
    stage.handle([control("DELETE", "d")])
    assert store.get_job("d") is None and store.task_events("d") == []


def test_a_run_stopped_before_admission_leaves_its_gang_and_no_charge(store) -> None:
    stage, out, _ = entitle_with(store)
    big = one_task_gang("big-0-1", cpu=8)
    gang = one_task_gang("g-0-1", cpu=3)
    gang["tasks"].append({**gang["tasks"][0], "task_id": "g-1-1", "instance": 1})
    stage.handle([record("task-demand", "peloton.GangDemand", big, key="/p"),
                  record("task-demand", "peloton.GangDemand", gang, key="/p")])
    assert len(out.take("admitted-gangs")) == 1  # the 8-cpu one; the 2-task gang waits
    stage.handle([record("task-demand", "peloton.TaskRelease", {
        "task_id": "g-0-1", "job_id": "g", "pool": "/p", "reason": "TASK_KILLED", "timestamp_ms": 1}, key="/p")])
    [row] = store.queued_gangs()
    assert [t["task_id"] for t in row.gang["tasks"]] == ["g-1-1"]  # the rest of the gang waits on
    stage.handle([record("task-demand", "peloton.TaskRelease", {
        "task_id": "big-0-1", "job_id": "big", "pool": "/p", "reason": "TASK_FINISHED", "timestamp_ms": 1},
        key="/p")])
    [(_, _, _, admitted)] = out.take("admitted-gangs")
    assert [t["task_id"] for t in admitted["gang"]["tasks"]] == ["g-1-1"]
    assert [a.task_id for a in store.allocations()] == ["g-1-1"]


def test_a_service_task_that_exits_runs_again_after_its_backoff(admit, store) -> None:
    stage, out = admit
    service = JOB.format(name="svc", count=1, gang=0, cpu=1).replace("name: svc", "name: svc\ntype: SERVICE")
    stage.handle([command("svc", service)])
    out.take()
    before = int(time.time() * 1000)
    stage.handle([status_record("svc-0-1", "TASK_RUNNING"), status_record("svc-0-1", "TASK_FINISHED")])
    [again] = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert again["tasks"][0]["task_id"] == "svc-0-2"
    assert again["not_before_ms"] - before >= 29_000  # 30 s after the first exit
    assert store.get_job("svc").state != "SUCCEEDED"  # a service runs until it is stopped


def restart(job_id: str, batch_size: int, command_id: str | None = None) -> Record:
    return record("job-commands", "peloton.JobCommand", {
        "command_id": command_id or uuid.uuid4().hex, "kind": "RESTART", "job_id": job_id, "pool": "/p",
        "config": None, "instances": None, "batch_size": batch_size, "requested_by": "tester", "timestamp_ms": 1},
        key=job_id)


def killed_instances(out: RecordingEmitter) -> list[str]:
    return sorted({v["task_id"] for _, _, schema, v in out.take("placements") if schema == "peloton.TaskKill"})


def test_a_restart_replaces_runs_one_batch_at_a_time(admit, store) -> None:
    stage, out = admit
    stage.handle([command("rr", JOB.format(name="rr", count=3, gang=0, cpu=1))])
    stage.handle([status_record(f"rr-{i}-1", "TASK_RUNNING") for i in range(3)])
    out.take()
    stage.handle([restart("rr", batch_size=2)])
    assert killed_instances(out) == ["rr-0-1", "rr-1-1"]  # the first batch only
    stage.handle([status_record("rr-0-1", "TASK_KILLED", "RESTARTED"), status_record("rr-1-1", "TASK_KILLED",
                                                                                       "RESTARTED")])
    assert killed_instances(out) == []  # the next batch waits for the new runs to run
    assert {t.instance: t.run_id for t in store.tasks_of_job("rr")} == {0: 2, 1: 2, 2: 1}
    assert all(t.failures == 0 for t in store.tasks_of_job("rr"))
    stage.handle([status_record("rr-0-2", "TASK_RUNNING"), status_record("rr-1-2", "TASK_RUNNING")])
    assert killed_instances(out) == ["rr-2-1"]
    stage.handle([status_record("rr-2-1", "TASK_KILLED", "RESTARTED"), status_record("rr-2-2", "TASK_RUNNING")])
    assert store.get_job("rr").rollout is None and store.get_job("rr").state == "RUNNING"


def test_a_stop_during_a_restart_wins_over_the_restarts_kill(admit, store) -> None:
    stage, out = admit
    stage.handle([command("rs", JOB.format(name="rs", count=2, gang=0, cpu=1))])
    stage.handle([status_record(f"rs-{i}-1", "TASK_RUNNING") for i in range(2)])
    out.take()
    stage.handle([restart("rs", batch_size=1)])
    assert killed_instances(out) == ["rs-0-1"]
    stage.handle([control("STOP", "rs")])  # before the restart's kill has landed
    assert killed_instances(out) == ["rs-0-1", "rs-1-1"]  # the run being restarted is stopped too
    # the host manager reports the first kill's reason: the stop must still win
    stage.handle([status_record("rs-0-1", "TASK_KILLED", "RESTARTED"),
                  status_record("rs-1-1", "TASK_KILLED", "STOPPED")])
    assert [(t.run_id, t.state) for t in store.tasks_of_job("rs")] == [(1, "KILLED"), (1, "KILLED")]
    assert store.get_job("rs").state == "KILLED" and store.get_job("rs").rollout is None
    assert [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"] == []


def test_an_update_grows_the_job_and_rolls_a_changed_config_out(admit, store) -> None:
    stage, out = admit
    first = JOB.format(name="up", count=2, gang=0, cpu=1)
    stage.handle([command("up", first)])
    stage.handle([status_record(f"up-{i}-1", "TASK_RUNNING") for i in range(2)])
    out.take()

    def update(text: str) -> Record:
        return update_command("up", text, uuid.uuid4().hex)

    stage.handle([update(first.replace("instancecount: 2", "instancecount: 3"))])
    demand = [t["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"
              for t in v["tasks"]]
    assert demand == ["up-2-1"] and store.get_job("up").config_version == 2
    stage.handle([update(first.replace("name: up", "name: renamed\nlabels: [{key: team, value: x}]"))])
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "name: cannot change ('up' -> 'renamed')" in letter["reason"]
    assert "labels: cannot change ({} -> {'team': 'x'})" in letter["reason"]
    changed = first.replace("instancecount: 2", "instancecount: 3").replace("memlimitmb: 16", "memlimitmb: 32")
    stage.handle([update(changed + "changelog: {version: 2}\n")])
    assert killed_instances(out) == ["up-0-1", "up-1-1", "up-2-1"]
    stage.handle([status_record("up-0-1", "TASK_KILLED", "RESTARTED")])
    [gang] = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert gang["tasks"][0]["task_id"] == "up-0-2" and gang["tasks"][0]["resources"]["mem_mb"] == 32
    stage.handle([update(changed + "changelog: {version: 2}\n")])  # a stale version
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "changelog.version: 2 is not the job's current version 3" in letter["reason"]


def test_a_shrink_stops_the_extra_instances_highest_first_and_they_end_deleted(admit, store) -> None:
    stage, out = admit
    four = JOB.format(name="sh", count=4, gang=0, cpu=1) + "type: SERVICE\n"
    stage.handle([command("sh", four)])
    stage.handle([status_record(f"sh-{i}-1", "TASK_RUNNING") for i in range(4)])
    out.take()

    def update(text: str) -> Record:
        return update_command("sh", text, uuid.uuid4().hex)

    stage.handle([update(four.replace("instancecount: 4", "instancecount: 2"))])
    kills = [v["task_id"] for _, _, schema, v in out.take("placements") if schema == "peloton.TaskKill"]
    assert list(dict.fromkeys(kills)) == ["sh-3-1", "sh-2-1"]  # highest first
    stage.handle([status_record("sh-3-1", "TASK_KILLED", "STOPPED"), status_record("sh-2-1", "TASK_KILLED", "STOPPED")])
    tasks = {t.instance: t for t in store.tasks_of_job("sh")}
    assert [tasks[i].state for i in range(4)] == ["RUNNING", "RUNNING", "DELETED", "DELETED"]
    [why] = {e["message"] for e in store.task_events("sh") if e["state"] == "KILLING"}
    assert why.startswith("removed by update ") and why.endswith("(instanceCount 4 -> 2)")
    job = store.get_job("sh")
    assert (job.instance_count, job.state) == (2, "RUNNING")  # the removed count for nothing
    [wf] = store.updates_of_job("sh")
    assert wf["removed"] == [2, 3] and wf["state"] == "SUCCEEDED"
    # Grown again: instance 2 comes back as a new run, numbered after the removed one.
    stage.handle([update(four.replace("instancecount: 4", "instancecount: 3"))])
    demand = [t["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"
              for t in v["tasks"]]
    assert demand == ["sh-2-2"]


def test_a_rolling_stop_and_start_go_a_batch_at_a_time_as_workflows(admit, store) -> None:
    stage, out = admit
    stage.handle([command("ro", JOB.format(name="ro", count=3, gang=0, cpu=1) + "type: SERVICE\n")])
    stage.handle([status_record(f"ro-{i}-1", "TASK_RUNNING") for i in range(3)])
    out.take()

    def control(kind: str, batch: int) -> Record:
        return record("job-commands", "peloton.JobCommand", {
            "command_id": f"{kind.lower()}-1", "kind": kind, "job_id": "ro", "pool": "/p", "config": None,
            "instances": None, "batch_size": batch, "requested_by": "ann", "timestamp_ms": 1}, key="ro")

    stage.handle([control("STOP", 1)])
    assert killed_instances(out) == ["ro-0-1"]  # one at a time
    stage.handle([status_record("ro-0-1", "TASK_KILLED", "STOPPED")])
    assert killed_instances(out) == ["ro-1-1"]
    stage.handle([status_record("ro-1-1", "TASK_KILLED", "STOPPED")])
    stage.handle([status_record("ro-2-1", "TASK_KILLED", "STOPPED")])
    stop = store.get_update("stop-1")
    assert (stop["kind"], stop["state"], stop["done"]) == ("STOP", "SUCCEEDED", [0, 1, 2])
    assert store.get_job("ro").state == "KILLED"

    stage.handle([control("START", 2)])
    started = [t["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"
               for t in v["tasks"]]
    assert started == ["ro-0-2", "ro-1-2"]  # two at a time
    stage.handle([status_record("ro-0-2", "TASK_RUNNING"), status_record("ro-1-2", "TASK_RUNNING")])
    started = [t["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"
               for t in v["tasks"]]
    assert started == ["ro-2-2"]
    stage.handle([status_record("ro-2-2", "TASK_RUNNING")])
    assert store.get_update("start-1")["state"] == "SUCCEEDED" and store.get_job("ro").state == "RUNNING"


def test_maximum_running_instances_hold_the_rest_until_others_end(admit, store) -> None:
    stage, out = admit
    throttled = JOB.format(name="th", count=4, gang=0, cpu=1).replace("sla: {", "sla: {maximumRunningInstances: 2, ")
    stage.on_assign([("task-status", p) for p in range(4)])
    stage.handle([command("th", throttled)])
    sent = [t["task_id"] for _, _, s, v in out.take("task-demand") if s == "peloton.GangDemand" for t in v["tasks"]]
    assert sent == ["th-0-1", "th-1-1"]
    assert [t.state for t in store.tasks_of_job("th")] == ["PENDING", "PENDING", "INITIALIZED", "INITIALIZED"]
    stage.handle([status_record("th-0-1", "TASK_RUNNING"), status_record("th-0-1", "TASK_FINISHED")])
    sent = [t["task_id"] for _, _, s, v in out.take("task-demand") if s == "peloton.GangDemand" for t in v["tasks"]]
    assert sent == ["th-2-1"]


def test_runs_past_their_deadlines_are_killed_and_end_as_the_rule_says(admit, store) -> None:
    stage, out = admit
    stage.on_assign([("task-status", p) for p in range(4)])
    timed = JOB.format(name="dl", count=2, gang=0, cpu=1).replace("sla: {", "sla: {maxRunningTime: 1, ")
    stage.handle([command("dl", timed)])
    stage.handle([status_record("dl-0-1", "TASK_RUNNING"), status_record("dl-1-1", "TASK_STAGING")])
    out.take()
    stage.settings = Settings(launch_timeout_s=0.5)
    time.sleep(1.1)
    stage.tick(time.monotonic())
    assert killed_instances(out) == ["dl-0-1", "dl-1-1"]
    stage.handle([status_record("dl-0-1", "TASK_KILLED", "DEADLINE_EXCEEDED"),
                  status_record("dl-1-1", "TASK_KILLED", "LAUNCH_TIMEOUT")])
    tasks = {t.instance: t for t in store.tasks_of_job("dl")}
    assert (tasks[0].state, tasks[0].run_id) == ("KILLED", 1)  # over its own limit: killed, as Peloton does
    assert (tasks[1].state, tasks[1].run_id) == ("PENDING", 2)  # never started: run again


def test_runs_on_a_draining_host_move_one_budget_at_a_time_and_rerun_without_a_failure(admit, store) -> None:
    stage, out = admit
    stage.on_assign([("task-status", p) for p in range(4)])
    budgeted = JOB.format(name="sv", count=3, gang=0, cpu=1).replace("sla: {", "sla: {maximumUnavailableInstances: 1, ")
    stage.handle([command("sv", budgeted)])
    stage.handle([status_record(f"sv-{i}-1", "TASK_RUNNING") for i in range(3)])
    tasks = store.tasks_of_job("sv")
    for t in tasks:
        t.host_id = "h1"
    store.update_task_runs(tasks)
    out.take()
    now = time.monotonic()
    stage.tick(now)
    assert killed_instances(out) == []  # h1 is UP
    stage.hosts.values["h1"] = {**stage.hosts.values["h1"], "state": "DRAINING"}
    stage.tick(now + 1)
    assert killed_instances(out) == ["sv-0-1"]
    stage.tick(now + 2)
    assert killed_instances(out) == []  # instance 0 is down (KILLING): the others wait
    stage.handle([status_record("sv-0-1", "TASK_KILLED", "HOST_MAINTENANCE")])
    first = store.tasks_of_job("sv")[0]
    assert (first.state, first.run_id, first.failures) == ("PENDING", 2, 0)  # runs again, no failure counted
    stage.tick(now + 3)
    assert killed_instances(out) == []  # still down until its new run runs
    stage.handle([status_record("sv-0-2", "TASK_RUNNING", host="h2")])  # elsewhere
    stage.tick(now + 4)
    assert killed_instances(out) == ["sv-1-1"]


def test_a_daemon_job_is_refused_at_create(admit, store) -> None:
    stage, out = admit
    stage.handle([command("dm", JOB.format(name="dm", count=1, gang=0, cpu=1) + "type: DAEMON\n")])
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "type: DAEMON jobs (one task on every host) are not supported" in letter["reason"]
    assert store.get_job("dm") is None


def test_an_end_read_again_sends_its_release_again_so_no_allocation_is_held_for_ever(admit, store) -> None:
    """A batch whose store commit landed but whose output did not (the stage was killed before
    its transaction committed) is read again: the end changes nothing in the store, but its
    release must still reach entitle (which dedupes it)."""
    stage, out = admit
    stage.handle([command("r", JOB.format(name="r", count=1, gang=0, cpu=1))])
    stage.handle([status_record("r-0-1", "TASK_RUNNING"), status_record("r-0-1", "TASK_FINISHED")])
    out.take()
    stage.handle([status_record("r-0-1", "TASK_FINISHED")])  # read again after the crash
    releases = [v["task_id"] for _, _, schema, v in out.take("task-demand") if schema == "peloton.TaskRelease"]
    assert releases == ["r-0-1"]
    assert [e["state"] for e in store.task_events("r")].count("SUCCEEDED") == 1  # the store moved once


def agent_report(host_id: str, running: list[str], partition: int, read: int | None = None) -> Record:
    return record("agent-reports", "peloton.AgentReport", {
        "host_id": host_id, "agent_id": "a1", "capacity": {"cpu": 8.0, "mem_mb": 1024.0, "disk_mb": 1000.0, "gpu": 0.0},
        "labels": {}, "running": running, "port_ranges": [{"low": 31000, "high": 32000}], "updates": [],
        "sent_ms": 1, "commands_read": read}, key=host_id, partition=partition)


def test_a_host_manager_waits_for_an_agent_to_read_a_late_launch_and_counts_it(store) -> None:
    from peloton import metrics

    shard = partition_for("agent-x", 4)
    stage = LaunchStage(store)
    out = bound(stage, hosts="", agent_heartbeat_s=1.0)
    stage.on_assign([("placements", p) for p in range(4)])
    asked = []
    stage.ends = lambda topic, partitions: asked.append(topic) or {p: 12 for p in partitions}
    stage.handle([agent_report("agent-x", [], shard, read=3)])
    placement = placement_of(one_task_gang("a-0-1"), host_id="agent-x")
    stage.handle([Record(placement.topic, shard, placement.offset, placement.key, placement.schema, placement.value,
                         placement.raw_key, placement.raw_value)])
    stage.tick(time.monotonic())
    assert [t["task_id"] for _, _, _, c in out.take("agent-commands") for t in c["launches"]] == ["a-0-1"]
    out.take()
    sent = stage.remote.runs["a-0-1"][1]
    stage.remote._clock = lambda: sent + stage.settings.agent_timeout_s + 1  # past the grace
    stage.handle([agent_report("agent-x", [], shard, read=5)])  # the agent has not read the launch
    stage.tick(time.monotonic())
    assert "a-0-1" in stage.remote.runs and asked == ["agent-commands"]
    assert metrics.UNREAD_LAUNCHES._value.get() == 1
    assert not [v for _, _, _, v in out.take("task-status") if v.get("state") == "TASK_LOST"]
    stage.handle([agent_report("agent-x", [], shard, read=12)])  # read past it, and does not run it
    stage.tick(time.monotonic())
    assert [v["reason"] for _, _, _, v in out.take("task-status") if v.get("state") == "TASK_LOST"] == [
        "REASON_RECONCILIATION"]
    assert metrics.UNREAD_LAUNCHES._value.get() == 0


def test_a_host_manager_that_takes_over_waits_for_its_agents_and_launches_what_never_went_out(store) -> None:
    from peloton.store import Launch

    shard = partition_for("agent-x", 4)
    # The last owner claimed the run and died before its launch (and the placement's offset) committed.
    store.claim_launches([Launch("a-0-1", "a", 0, 1, "agent-x", 1.0, 16.0, 1.0, 0.0, 5)])
    stage = LaunchStage(store)
    out = bound(stage, hosts="", agent_heartbeat_s=1.0)
    stage.on_assign([("placements", p) for p in range(4)])
    out.take()
    placement = placement_of(one_task_gang("a-0-1"), host_id="agent-x")
    placement = Record(placement.topic, shard, placement.offset, placement.key, placement.schema, placement.value,
                       placement.raw_key, placement.raw_value)
    stage.handle([placement])  # the placement, read again; agent-x has not reported to this owner yet
    assert out.take("agent-commands") == [] and not [s for s in out.take("task-status") if s[3].get("state") ==
                                                      "TASK_DROPPED"], "refused before the host could report"
    assert stage.held_offsets() == {("placements", shard): placement.offset}
    stage.handle([agent_report("agent-x", [], shard)])  # it reports, without the run
    stage.tick(time.monotonic())
    [(_, _, _, launch)] = out.take("agent-commands")
    assert [t["task_id"] for t in launch["launches"]] == ["a-0-1"]
    assert ("LAUNCHING", [0]) in [(v["state"], [r["instance"] for r in v["runs"]])
                                  for _, _, _, v in out.take("task-status") if "runs" in v]
    assert stage.held_offsets() == {}
    assert store.launch_counts("a") == {0: 1}


def test_the_late_end_of_a_run_given_up_goes_into_its_history_and_changes_nothing_else(admit, store) -> None:
    stage, out = admit
    stage.handle([command("s", JOB.format(name="s", count=1, gang=0, cpu=1))])
    stage.handle([status_record("s-0-1", "TASK_RUNNING"),
                  status_record("s-0-1", "TASK_LOST", "REASON_AGENT_DISCONNECTED")])
    out.take()
    late = status_record("s-0-1", "TASK_LOST", "REASON_AGENT_FENCED")
    late.value["host_id"] = "h1"  # its agent killed it when its lease ran out, and says so once it can
    stage.handle([late])
    assert [(e["run_id"], e["state"], e["reason"]) for e in store.task_events("s")][-2:] == [
        (1, "LOST", "REASON_AGENT_DISCONNECTED"), (1, "LOST", "REASON_AGENT_FENCED")]
    [task] = store.tasks_of_job("s")
    assert (task.run_id, task.state) == (2, "PENDING")
    assert [schema for _, _, schema, _ in out.take()] == ["peloton.TaskRelease"]  # sent again, deduped by entitle


SERVICE = JOB.replace("name: {name}", "name: {name}\ntype: SERVICE")


def steer_update(kind: str, job_id: str, update_id: str) -> Record:
    return record("job-commands", "peloton.JobCommand", {
        "command_id": uuid.uuid4().hex, "kind": kind, "job_id": job_id, "pool": "/p", "update_id": update_id,
        "requested_by": "tester", "timestamp_ms": 1}, key=job_id)


def update_command(job_id: str, text: str, command_id: str, **options) -> Record:
    return record("job-commands", "peloton.JobCommand", {
        "command_id": command_id, "kind": "UPDATE", "job_id": job_id, "pool": "/p", "config": text,
        "requested_by": "tester", "timestamp_ms": 1, **options}, key=job_id)


def running_service(stage, out, job_id: str, count: int) -> str:
    text = SERVICE.format(name=job_id, count=count, gang=0, cpu=1)
    stage.handle([command(job_id, text)])
    stage.handle([status_record(f"{job_id}-{i}-1", "TASK_RUNNING") for i in range(count)])
    out.take()
    return text


def test_an_update_is_a_workflow_that_pauses_resumes_and_ends_succeeded(admit, store) -> None:
    stage, out = admit
    text = running_service(stage, out, "wf", 3)
    stage.handle([update_command("wf", text.replace("memlimitmb: 16", "memlimitmb: 32"), "u1", batch_size=1)])
    assert killed_instances(out) == ["wf-0-1"]
    wf = store.get_update("u1")
    assert (wf["state"], wf["in_flight"], wf["remaining"], wf["from_version"], wf["to_version"]) == (
        "ROLLING_FORWARD", [0], [1, 2], 1, 2)
    assert store.get_job("wf").rollout["update_id"] == "u1"
    stage.handle([steer_update("PAUSE", "wf", "u1")])
    stage.handle([status_record("wf-0-1", "TASK_KILLED", "RESTARTED"), status_record("wf-0-2", "TASK_RUNNING")])
    assert killed_instances(out) == []  # paused: the next batch waits
    wf = store.get_update("u1")
    assert (wf["state"], wf["done"], wf["message"]) == ("PAUSED", [0], "paused by tester")
    stage.handle([steer_update("PAUSE", "wf", "u1")])
    assert [v["reason"] for _, _, _, v in out.take("dead-letters")] == ["update u1 is paused already"]
    stage.handle([steer_update("RESUME", "wf", "u1")])
    assert killed_instances(out) == ["wf-1-1"]
    for i in (1, 2):
        stage.handle([status_record(f"wf-{i}-1", "TASK_KILLED", "RESTARTED"),
                      status_record(f"wf-{i}-2", "TASK_RUNNING")])
    wf = store.get_update("u1")
    assert (wf["state"], wf["done"], wf["completed_ms"] is not None) == ("SUCCEEDED", [0, 1, 2], True)
    assert store.get_job("wf").rollout is None
    assert store.job_config("wf", 1) == text and store.job_config("wf", 2) == store.get_job("wf").config_text
    stage.handle([steer_update("ABORT", "wf", "u1")])
    assert [v["reason"] for _, _, _, v in out.take("dead-letters")] == [
        "update u1 is SUCCEEDED already: nothing to abort"]


def test_an_update_whose_new_runs_fail_rolls_back_to_the_old_config(admit, store) -> None:
    stage, out = admit
    text = running_service(stage, out, "fb", 3)
    bad = text.replace("value: 'true'", "value: 'exit 3'")
    stage.handle([update_command("fb", bad, "u2", batch_size=1, max_instance_retries=2, max_failure_instances=1,
                                 rollback_on_failure=True)])
    assert killed_instances(out) == ["fb-0-1"]
    stage.handle([status_record("fb-0-1", "TASK_KILLED", "RESTARTED"), status_record("fb-0-2", "TASK_RUNNING")])
    assert killed_instances(out) == ["fb-1-1"]  # RUNNING: done, for now
    stage.handle([status_record("fb-0-2", "TASK_FAILED")])  # a service reruns it: one failure
    assert store.get_update("u2")["state"] == "ROLLING_FORWARD"
    stage.handle([status_record("fb-0-3", "TASK_RUNNING"), status_record("fb-0-3", "TASK_FAILED")])
    wf = store.get_update("u2")
    assert (wf["state"], wf["to_version"], wf["rolled_back"]) == ("ROLLING_BACKWARD", 3, [0, 1])
    assert "1 instance failed (0), max-failure-instances 1: rolling back" in wf["message"]
    job = store.get_job("fb")
    assert (job.config_version, job.config_text) == (3, text)  # the old config, as a new version
    assert killed_instances(out) == ["fb-0-4"]  # the rollback's first batch: the failing instance first
    out.take("task-demand")
    stage.handle([status_record("fb-0-4", "TASK_KILLED", "RESTARTED")])
    [gang] = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert gang["tasks"][0]["task_id"] == "fb-0-5" and "exit 3" not in str(gang["tasks"][0]["command"])
    stage.handle([status_record("fb-0-5", "TASK_RUNNING")])
    assert killed_instances(out) == []  # fb-1-1 is being replaced already: its next run has the old config
    assert store.get_update("u2")["in_flight"] == [1]
    stage.handle([status_record("fb-1-1", "TASK_KILLED", "RESTARTED"), status_record("fb-1-2", "TASK_RUNNING")])
    wf = store.get_update("u2")
    assert (wf["state"], wf["done"]) == ("ROLLED_BACK", [0, 1])
    assert store.get_job("fb").rollout is None and [t.run_id for t in store.tasks_of_job("fb")] == [5, 2, 1]


def test_an_update_whose_last_batch_runs_while_an_earlier_instance_failed_waits_for_that_one(admit, store) -> None:
    """Seen in CI: every instance's new run RUNNING, the first already failed once and waiting
    out its backoff; the update ended SUCCEEDED before the second failure that would roll it
    back. It waits now for such an instance to run again, or to fail by its retries."""
    stage, out = admit

    def last_batch_running(job: str, update_id: str) -> None:
        text = running_service(stage, out, job, 2)
        stage.handle([update_command(job, text.replace("value: 'true'", "value: 'exit 3'"), update_id, batch_size=1,
                                     max_instance_retries=2, max_failure_instances=1, rollback_on_failure=True)])
        assert killed_instances(out) == [f"{job}-0-1"]
        stage.handle([status_record(f"{job}-0-1", "TASK_KILLED", "RESTARTED"),
                      status_record(f"{job}-0-2", "TASK_RUNNING")])
        assert killed_instances(out) == [f"{job}-1-1"]
        stage.handle([status_record(f"{job}-0-2", "TASK_FAILED")])  # one failure: its next run waits
        stage.handle([status_record(f"{job}-1-1", "TASK_KILLED", "RESTARTED"),
                      status_record(f"{job}-1-2", "TASK_RUNNING")])
        wf = store.get_update(update_id)
        assert wf["state"] == "ROLLING_FORWARD" and wf["in_flight"] == [], wf
        assert wf["message"] == "waits: not running well since their new runs started: instances 0"

    last_batch_running("lb", "u4")  # its next run fails at once, RUNNING and FAILED in one report
    stage.handle([status_record("lb-0-3", "TASK_RUNNING"), status_record("lb-0-3", "TASK_FAILED")])
    wf = store.get_update("u4")
    assert wf["state"] == "ROLLING_BACKWARD" and "max-failure-instances 1: rolling back" in wf["message"]

    last_batch_running("lc", "u5")  # its next run runs: the update is done
    stage.handle([status_record("lc-0-3", "TASK_RUNNING")])
    wf = store.get_update("u5")
    assert (wf["state"], wf["message"]) == ("SUCCEEDED", ""), wf


def test_a_run_being_replaced_that_ends_on_its_own_first_reruns_with_the_jobs_config_as_it_is_now(admit, store) -> None:
    """The kill of a replacement (an update's, a rollback's) can come after the run ended by
    itself: its next run is still the replacement, not a retry of the config it ran (a rollback
    ran the broken config again on an instance whose run exited before the kill landed)."""
    stage, out = admit
    text = running_service(stage, out, "oe", 2)
    new = text.replace("value: 'true'", "value: 'echo new'")
    stage.handle([update_command("oe", new, "u3", batch_size=1)])
    assert killed_instances(out) == ["oe-0-1"]
    out.take("task-demand")
    stage.handle([status_record("oe-0-1", "TASK_FAILED")])  # exited before the kill reached it
    [gang] = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
    assert gang["tasks"][0]["task_id"] == "oe-0-2" and "echo new" in str(gang["tasks"][0]["command"])


def test_a_new_update_aborts_the_one_in_progress_and_a_stop_aborts_any(admit, store) -> None:
    stage, out = admit
    text = running_service(stage, out, "ab", 2)
    stage.handle([update_command("ab", text.replace("memlimitmb: 16", "memlimitmb: 32"), "u3", batch_size=1,
                                 start_paused=True)])
    assert killed_instances(out) == []  # started paused
    assert store.get_update("u3")["state"] == "PAUSED"
    stage.handle([record("job-commands", "peloton.JobCommand", {
        "command_id": "r4", "kind": "RESTART", "job_id": "ab", "pool": "/p", "batch_size": 1,
        "requested_by": "tester", "timestamp_ms": 1}, key="ab")])
    superseded = store.get_update("u3")
    assert superseded["state"] == "ABORTED" and superseded["message"] == "superseded by update r4"
    assert (store.get_update("r4")["kind"], store.get_update("r4")["state"]) == ("RESTART", "ROLLING_FORWARD")
    assert killed_instances(out) == ["ab-0-1"]
    stage.handle([record("job-commands", "peloton.JobCommand", {
        "command_id": "r5", "kind": "RESTART", "job_id": "ab", "pool": "/p", "batch_size": -1,
        "requested_by": "tester", "timestamp_ms": 1}, key="ab")])
    assert [v["reason"] for _, _, _, v in out.take("dead-letters")] == ["batch-size -1: must be 0 or more"]
    stage.handle([steer_update("ROLLBACK", "ab", "r4")])
    assert [v["reason"] for _, _, _, v in out.take("dead-letters")] == [
        "update r4 is a restart: it has no earlier config to go back to"]
    stage.handle([control("STOP", "ab")])
    wf = store.get_update("r4")
    assert (wf["state"], wf["message"]) == ("ABORTED", "the job was stopped by tester")
    assert [u["update_id"] for u in store.updates_of_job("ab")] == ["r4", "u3"]


def test_an_abort_stops_the_rollout_where_it_is(admit, store) -> None:
    stage, out = admit
    text = running_service(stage, out, "at", 3)
    stage.handle([update_command("at", text.replace("memlimitmb: 16", "memlimitmb: 32"), "u5", batch_size=1)])
    assert killed_instances(out) == ["at-0-1"]
    stage.handle([steer_update("ABORT", "at", "u5")])
    stage.handle([status_record("at-0-1", "TASK_KILLED", "RESTARTED"), status_record("at-0-2", "TASK_RUNNING")])
    assert killed_instances(out) == []
    assert store.get_update("u5")["state"] == "ABORTED" and store.get_job("at").rollout is None
    assert [t.run_id for t in store.tasks_of_job("at")] == [2, 1, 1]


def health_record(task_id: str, health: str, message: str = "") -> Record:
    job_id, instance, run = task_id.rsplit("-", 2)
    return record("task-status", "peloton.TaskStatus", {
        "event_id": uuid.uuid4().hex, "task_id": task_id, "job_id": job_id, "instance": int(instance),
        "run_id": int(run), "host_id": "h1", "state": "TASK_RUNNING", "health": health, "message": message,
        "reason": "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED" if message else "", "exit_code": None, "signal": None,
        "timestamp_ms": 1}, key=job_id)


def test_a_runs_health_is_kept_and_each_change_is_in_its_history_once(admit, store) -> None:
    stage, out = admit
    stage.handle([command("hc", SERVICE.format(name="hc", count=1, gang=0, cpu=1))])
    stage.handle([health_record("hc-0-1", "HEALTH_UNKNOWN")])  # the TASK_RUNNING of a run with a check
    assert store.tasks_of_job("hc")[0].health == "HEALTH_UNKNOWN"
    stage.handle([health_record("hc-0-1", "HEALTHY", "health check passed: command exited 0")])
    stage.handle([health_record("hc-0-1", "HEALTHY", "health check passed: command exited 0")])  # a repeat
    stage.handle([health_record("hc-0-0", "UNHEALTHY", "an older run")])  # not the current run
    [task] = store.tasks_of_job("hc")
    assert (task.state, task.health) == ("RUNNING", "HEALTHY")
    said = [e["message"] or "" for e in store.task_events("hc") if e["state"] == "RUNNING"]
    assert [m for m in said if "HEALTHY" in m] == ["HEALTHY: health check passed: command exited 0"]
    stage.handle([status_record("hc-0-1", "TASK_FAILED", "REASON_TASK_UNHEALTHY")])
    [task] = store.tasks_of_job("hc")
    assert (task.run_id, task.state, task.health) == (2, "PENDING", "")  # a service runs again, health unknown


def test_an_in_place_restart_asks_for_each_runs_own_host(admit, store) -> None:
    stage, out = admit
    running_service(stage, out, "ip", 2)
    for in_place, cid in ((True, "r1"), (False, "r2")):
        stage.handle([record("job-commands", "peloton.JobCommand", {
            "command_id": cid, "kind": "RESTART", "job_id": "ip", "pool": "/p", "in_place": in_place,
            "requested_by": "tester", "timestamp_ms": 1}, key="ip")])
        runs = {t.instance: t.run_id for t in store.tasks_of_job("ip")}
        out.take("task-demand")
        stage.handle([status_record(f"ip-{i}-{runs[i]}", "TASK_KILLED", "RESTARTED", host=f"host-{i}") for i in (0, 1)])
        gangs = [v for _, _, schema, v in out.take("task-demand") if schema == "peloton.GangDemand"]
        assert {g["tasks"][0]["instance"]: g["tasks"][0]["prefer_host"] for g in gangs} == (
            {0: "host-0", 1: "host-1"} if in_place else {0: "", 1: ""})
        stage.handle([status_record(f"ip-{i}-{runs[i] + 1}", "TASK_RUNNING") for i in (0, 1)])
        assert store.get_update(cid)["state"] == "SUCCEEDED"


def test_a_takeover_kills_again_the_runs_a_killed_owner_left_killing(admit, store) -> None:
    """The last owner stored a stop (its runs KILLING, the command claimed) and died before its
    transaction sent the kills: the redelivered command is claimed already, so the new owner of
    the jobs' status partitions sends every KILLING run's kill again."""
    stage, out = admit
    stage.handle([command("k", JOB.format(name="k", count=3, gang=0, cpu=1))])
    stage.handle([status_record("k-0-1", "TASK_RUNNING"), status_record("k-1-1", "TASK_FINISHED")])
    stage.handle([control("STOP", "k")])
    out.take()  # the kills the killed owner never sent
    stage.on_revoke([("task-status", p) for p in range(4)] + [("job-commands", p) for p in range(4)])
    stage.handle([control("STOP", "k")])  # redelivered: claimed, it acts no more
    assert out.take("placements") == []
    theirs = partition_for("k", 4)
    stage.on_assign([("task-status", p) for p in range(4) if p != theirs])
    assert out.take("placements") == []  # not the job's partition: nothing
    stage.on_assign([("task-status", theirs), ("job-commands", theirs)])
    kills = [v for _, _, schema, v in out.take("placements") if schema == "peloton.TaskKill"]
    assert sorted({k["task_id"] for k in kills}) == ["k-0-1", "k-2-1"] and len(kills) == 2 * 4
    assert {k["reason"] for k in kills} == {"STOPPED"}
    stage.handle([status_record("k-0-1", "TASK_KILLED", "STOPPED"), status_record("k-2-1", "TASK_KILLED", "STOPPED")])
    assert store.get_job("k").state == "KILLED"
    out.take()
    stage.on_revoke([("task-status", theirs)])
    stage.on_assign([("task-status", theirs)])
    assert out.take("placements") == []  # none KILLING any more


def test_a_create_under_a_taken_job_id_is_refused_unless_it_is_the_same_create_again(admit, store) -> None:
    """Ids chosen by their senders (Peloton's job create -i) can collide: another job under a
    taken id is refused with the reason; the same create delivered again (even after an update
    changed the job's config) is applied, as a redelivery must be."""
    stage, out = admit
    text = running_service(stage, out, "taken", 2)
    first = command("taken", text)
    stage.handle([first])
    assert out.take("dead-letters") == []
    stage.handle([command("taken", text.replace("memlimitmb: 16", "memlimitmb: 32"))])
    [(_, _, _, letter)] = out.take("dead-letters")
    assert "job taken exists already with another config or pool: a job id names one job" in letter["reason"]
    stage.handle([update_command("taken", text.replace("memlimitmb: 16", "memlimitmb: 24"), "u-taken", batch_size=2)])
    out.take()
    stage.handle([first])  # the create itself again, after the update
    assert out.take("dead-letters") == [] and store.command_outcome(first.value["command_id"])["state"] == "applied"


def test_entitle_forgets_ended_runs_after_a_day_a_batch_a_tick_and_then_hourly(store) -> None:
    """Ended runs are kept released_keep_s to recognise a late redelivery, then forgotten: every
    hour, also when the instance's assignment never changes, and a batch a tick through a backlog."""
    from peloton.runtime.record import now_ms
    from peloton.store import Allocation

    stage, _, _ = entitle_with(store)
    stage.released_sweep.batch = 2
    day = 86_400_000
    old = [f"old{i}-0-1" for i in range(3)]
    store.add_allocations([Allocation(t, "/p", t, 1, 1, 0, 0, 1) for t in [*old, "new-0-1", "live-0-1"]])
    store.release_allocations(old, now_ms() - 2 * day)
    store.release_allocations(["new-0-1"], now_ms())
    start = time.monotonic()
    stage.tick(start)  # the first tick sweeps: a batch of two
    assert len(store.allocation_states(old)) == 1
    stage.tick(start + 1)  # a whole batch went: the next tick goes on
    assert store.allocation_states([*old, "new-0-1", "live-0-1"]) == {"new-0-1": "released", "live-0-1": "held"}
    store.add_allocations([Allocation("later-0-1", "/p", "later-0-1", 1, 1, 0, 0, 1)])
    store.release_allocations(["later-0-1"], now_ms() - 2 * day)
    stage.tick(start + 2)
    stage.tick(start + 60)  # within the hour: kept
    assert store.allocation_states(["later-0-1"]) == {"later-0-1": "released"}
    stage.tick(start + 1 + stage.released_sweep.every)
    assert store.allocation_states(["later-0-1"]) == {}
