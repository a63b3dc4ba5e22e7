"""The storage gateway contract, run against every backend this machine can reach."""

from __future__ import annotations

import pytest

from peloton.store import Allocation, Launch, QueuedGang, TaskRow, open_store
from tests.builders.store import job, launch_spec_of, task
from tests.conftest import STORE_PARAMS, fresh_store_url


@pytest.fixture(params=STORE_PARAMS)
def store(request, tmp_path):
    s = open_store(fresh_store_url(request, request.param, tmp_path))
    yield s
    s.close()


def test_create_jobs_is_idempotent(store) -> None:
    assert store.create_jobs([job("a")], [task("a", 0), task("a", 1)]) == {"a"}
    assert store.create_jobs([job("a"), job("b")], [task("a", 0), task("b", 0)]) == {"b"}
    assert len(store.tasks_of_job("a")) == 2
    assert store.task_state_counts(["a", "b"]) == {"a": {"PENDING": 2}, "b": {"PENDING": 1}}


def test_an_ended_run_is_remembered_as_released_and_a_refused_one_forgotten(store) -> None:
    store.add_allocations([Allocation(t, "/p", "g", 1, 2, 3, 0, 1) for t in ("x", "y", "z")])
    store.release_allocations(["x"], 100)
    store.release_allocations(["x"], 200)  # ended once
    store.remove_allocations(["y"])
    assert store.allocation_states(["x", "y", "z", "nope"]) == {"x": "released", "z": "held"}
    assert [a.task_id for a in store.allocations()] == ["z"]  # only what is held counts
    assert store.forget_released_allocations(before_ms=150, limit=10) == 1
    assert store.allocation_states(["x"]) == {}
    store.add_allocations([Allocation("z", "/p", "g", 1, 2, 3, 0, 1)])
    store.release_allocations(["z"], 300)
    store.add_allocations([Allocation("z", "/p", "g", 1, 2, 3, 0, 2)])  # admitted again: held again
    assert store.allocation_states(["z"]) == {"z": "held"}
    store.add_allocations([Allocation(t, "/p", "g", 1, 2, 3, 0, 1) for t in ("w1", "w2", "w3")])
    store.release_allocations(["w1", "w2", "w3"], 100)
    first = store.forget_released_allocations(before_ms=150, limit=2)  # a batch at a time
    assert first == (3 if store.sweeps_whole_partitions else 2)  # such a store forgets all its scan found
    assert first + store.forget_released_allocations(before_ms=150, limit=2) == 3


def test_claim_launches_once(store) -> None:
    row = Launch("t-0-1", "t", 0, 1, "h", 1, 1, 1, 0, 5)
    assert store.claim_launches([row]) == {"t-0-1"}
    assert store.claim_launches([row]) == set()
    assert [x.task_id for x in store.active_launches(["h"])] == ["t-0-1"]
    store.end_launches(["t-0-1"], 9)
    assert store.active_launches(["h"]) == []
    assert store.claim_launches([row]) == set()  # its placement read again: it stays ended
    assert store.active_launches(["h"]) == [] and store.active_launch_hosts() == []
    assert store.launch_counts("t") == {0: 1}


def test_ended_runs_are_forgotten_once_their_placements_cannot_be_read_again(store) -> None:
    """A launch is the claim that stops a placement read twice from launching twice: an ended run's
    goes CLAIMS_KEPT_MS after it ended, a running one's never (a store that expires_by_ttl: by the rows' TTL,
    which Cassandra's tables show)."""
    from peloton.store import CLAIMS_KEPT_MS

    store.claim_launches([Launch(f"t-{i}-1", "t", i, 1, "h", 1, 1, 1, 0, 5) for i in range(3)]
                         + [Launch("t-3-1", "t", 3, 1, "h", 1, 1, 1, 0, 5, 6)])  # ended before it was launched
    store.end_launches(["t-0-1"], 1_000, {"t-0-1": {"state": "TASK_FINISHED"}})
    store.end_launches(["t-1-1"], CLAIMS_KEPT_MS + 5_000)
    if store.expires_by_ttl:
        assert store.forget_launches(CLAIMS_KEPT_MS + 2_000, 10) == 0
        for table, where, column in (("launches", "host_id = 'h' AND task_id", "instance"),
                                     ("launch_claims", "task_id", "host_id"),
                                     ("launches_by_job", "job_id = 't' AND task_id", "instance")):
            ttls = {t: store.session.execute(f"SELECT TTL({column}) FROM {store.keyspace}.{table} WHERE {where} = %s",
                                             (t,)).one()[0] for t in ("t-0-1", "t-1-1", "t-2-1", "t-3-1")}
            assert ttls["t-2-1"] is None, table  # running: kept
            assert all(CLAIMS_KEPT_MS // 1000 - 60 < ttls[t] <= CLAIMS_KEPT_MS // 1000
                       for t in ("t-0-1", "t-1-1", "t-3-1")), (table, ttls)
        return
    assert store.forget_launches(CLAIMS_KEPT_MS + 2_000, 1) == 1  # a batch at a time
    assert store.forget_launches(CLAIMS_KEPT_MS + 2_000, 10) == 1  # of t-0-1 and t-3-1
    assert [x.task_id for x in store.active_launches(["h"])] == ["t-2-1"]
    assert store.launch_counts("t") == {1: 1, 2: 1}
    assert store.claim_launches([Launch("t-1-1", "t", 1, 1, "h", 1, 1, 1, 0, 5)]) == set()


def test_allocations_add_and_remove(store) -> None:
    store.add_allocations([Allocation("x", "/p", "g", 1, 2, 3, 0, 1), Allocation("y", "/p", "g", 1, 2, 3, 0, 1)])
    store.remove_allocations(["x", "nope"])
    assert [a.task_id for a in store.allocations()] == ["y"]


def test_a_failed_transaction_leaves_nothing(store) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        store.create_jobs([job("a")], [task("a", 0)])
        raise RuntimeError("boom")
    assert store.get_job("a") is None


def test_pools_are_stored_replaced_and_listed_by_path(store) -> None:
    store.put_pool("/b", {"path": "/b", "limit": 1})
    store.put_pool("/a", {"path": "/a", "limit": 2})
    store.put_pool("/b", {"path": "/b", "limit": 3, "updated_ms": 9})
    assert store.get_pool("/b") == {"path": "/b", "limit": 3, "updated_ms": 9}
    assert store.get_pool("/nope") is None
    assert list(store.list_pools()) == ["/a", "/b"]


def test_jobs_are_read_listed_and_updated_with_named_fields(store) -> None:
    a, b = job("a"), job("b")
    b.created_ms = 2
    store.create_jobs([a, b], [task("a", 0), task("b", 0)])
    assert store.get_job("a") == a and store.get_jobs(["a", "b", "zzz"]) == {"a": a, "b": b}
    assert [j.job_id for j in store.list_jobs(limit=1)] == ["b"]  # newest first
    a.state, a.completed_ms = "SUCCEEDED", 7
    store.update_jobs([a])
    assert store.get_job("a").completed_ms == 7 and store.get_job("a").preemptible is True
    assert [j.job_id for j in store.active_jobs()] == ["b"]


def test_jobs_are_listed_by_filter_newest_or_oldest_first_and_since_a_time(store) -> None:
    day = 86_400_000
    rows = []
    for i, (created, pool, owner, state) in enumerate(((5, "/p", "me", "PENDING"), (day + 5, "/q", "you", "RUNNING"),
                                                       (day + 6, "/p", "you", "RUNNING"), (3 * day, "/p", "me",
                                                                                            "SUCCEEDED"))):
        j = job(f"j{i}")
        j.created_ms, j.pool, j.owner, j.state = created, pool, owner, state
        rows.append(j)
    store.create_jobs(rows, [])
    ids = lambda jobs: [j.job_id for j in jobs]  # noqa: E731
    assert ids(store.list_jobs()) == ["j3", "j2", "j1", "j0"]
    assert ids(store.list_jobs(oldest_first=True)) == ["j0", "j1", "j2", "j3"]
    assert ids(store.list_jobs(2, oldest_first=True)) == ["j0", "j1"]
    assert ids(store.list_jobs(created_since_ms=day + 6)) == ["j3", "j2"]  # the bound counts, across days
    assert ids(store.list_jobs(created_since_ms=day, oldest_first=True)) == ["j1", "j2", "j3"]
    assert ids(store.list_jobs(states=["RUNNING"], pool="/p")) == ["j2"]
    assert ids(store.list_jobs(owner="you", created_since_ms=day + 6)) == ["j2"]
    assert ids(store.list_jobs(created_since_ms=4 * day)) == []


def test_tasks_are_found_by_instance_saved_and_their_events_kept_in_order(store) -> None:
    store.create_jobs([job("a")], [task("a", 0), task("a", 1), task("a", 2, "RUNNING")])
    found = store.tasks_by_instance([("a", 0), ("a", 2), ("zzz", 0)])
    assert sorted(found) == [("a", 0), ("a", 2)] and found[("a", 2)].state == "RUNNING"
    assert [t.instance for t in store.unlaunched_tasks_of_jobs(["a"])] == [0, 1]
    t = found[("a", 0)]
    t.state, t.run_id, t.task_id, t.spec, t.exit_code, t.message = "PENDING", 2, "a-0-2", {"x": [1]}, 3, "again"
    store.save_tasks([t])
    assert store.tasks_by_instance([("a", 0)])[("a", 0)] == t
    assert store.tasks_by_instance([("a", 0)], spec=False)[("a", 0)].spec is None  # not read
    # A status moves the run, not its spec: update_task_runs leaves the stored spec alone.
    t.state, t.host_id, t.failures, t.reason, t.updated_ms, t.spec = "RUNNING", "h2", 1, "why", 9, {"not": "stored"}
    store.update_task_runs([t])
    again = store.tasks_by_instance([("a", 0)])[("a", 0)]
    assert (again.state, again.host_id, again.failures, again.reason, again.updated_ms, again.spec) == (
        "RUNNING", "h2", 1, "why", 9, {"x": [1]})
    # same_run: the state columns alone; run, task and gang ids are left as stored.
    gang = t.gang_id
    t.state, t.exit_code, t.updated_ms, t.run_id, t.task_id, t.gang_id = "SUCCEEDED", 0, 10, 99, "a-0-99", "g-99"
    store.update_task_runs([t], same_run=True)
    again = store.tasks_by_instance([("a", 0)])[("a", 0)]
    assert (again.state, again.exit_code, again.updated_ms, again.run_id, again.task_id, again.gang_id) == (
        "SUCCEEDED", 0, 10, 2, "a-0-2", gang)
    t.run_id, t.task_id, t.gang_id = 2, "a-0-2", gang
    # same_host: a step on the host it is on; the state columns move, the host stays.
    t.state, t.reason, t.updated_ms = "KILLING", "stop", 11
    store.update_task_runs([t], same_run=True, same_host=True)
    again = store.tasks_by_instance([("a", 0)])[("a", 0)]
    assert (again.state, again.reason, again.updated_ms, again.host_id, again.run_id) == (
        "KILLING", "stop", 11, "h2", 2)
    t.state, t.reason, t.updated_ms = "SUCCEEDED", "why", 10
    store.update_task_runs([t], same_run=True)
    t.spec = {"x": [1]}
    store.record_task_events([("a-0-1", "a", 0, 1, "FAILED", "r", 3, 5, "h1", "boom"),
                              ("a-0-2", "a", 0, 2, "PENDING", "", None, 6, "", "")])
    assert [(e["run_id"], e["state"], e["exit_code"], e["host_id"], e["message"]) for e in store.task_events("a")] == [
        (1, "FAILED", 3, "h1", "boom"), (2, "PENDING", None, "", "")]


def test_the_runs_on_hosts_are_found_by_host_and_state(store) -> None:
    tasks = [task("a", i, "RUNNING") for i in range(4)] + [task("b", 0, "RUNNING")]
    for t, host in zip(tasks, ("h1", "h2", "h1", "h3", "h1"), strict=True):
        t.host_id = host
    tasks[2].state = "SUCCEEDED"
    store.create_jobs([job("a"), job("b")], tasks)
    store.update_task_runs(tasks)
    found = store.tasks_on_hosts(["h1", "h2"], ["LAUNCHED", "RUNNING"])
    assert [(t.job_id, t.instance, t.host_id) for t in found] == [("a", 0, "h1"), ("a", 1, "h2"), ("b", 0, "h1")]
    assert store.tasks_on_hosts(["h9"], ["RUNNING"]) == []


def test_alike_moves_of_many_runs_are_written_each_to_its_own_row(store) -> None:
    # Runs of one job moved alike go as one statement per job and step; every row must still get
    # its own values, another job's rows with the same instance numbers none, and a run given twice
    # its last values.
    store.create_jobs([job("a"), job("b")], [task(j, i) for j in "ab" for i in range(6)])
    moved = [task("a", i, "RUNNING") for i in range(6)]
    for t in moved:
        t.updated_ms, t.host_id = 7, f"h{t.instance % 2}"
    moved[4].state, moved[4].exit_code = "FAILED", 3
    again = task("a", 5, "LAUNCHED")
    store.update_task_runs(moved + [again], same_run=True)
    rows = {t.instance: t for t in store.tasks_of_job("a")}
    assert [(rows[i].state, rows[i].host_id, rows[i].exit_code, rows[i].updated_ms) for i in range(6)] == [
        ("RUNNING", "h0", None, 7), ("RUNNING", "h1", None, 7), ("RUNNING", "h0", None, 7),
        ("RUNNING", "h1", None, 7), ("FAILED", "h0", 3, 7), ("LAUNCHED", "", None, 0)]
    assert {t.state for t in store.tasks_of_job("b")} == {"PENDING"}
    assert store.task_state_counts(["a"]) == {"a": {"RUNNING": 4, "FAILED": 1, "LAUNCHED": 1}}


def test_a_deleted_job_leaves_no_task_or_event_and_commands_are_claimed_once(store) -> None:
    store.create_jobs([job("d")], [task("d", 0)])
    store.record_task_events([("d-0-1", "d", 0, 1, "KILLED", "", None, 5, "", "")])
    assert store.delete_job("d", 7) and not store.delete_job("d", 8)
    assert store.get_job("d") is None and store.tasks_of_job("d") == [] and store.task_events("d") == []
    assert store.deleted_jobs(["d", "never"]) == {"d": 7}  # the id stays taken a while
    assert store.claim_commands(["c1", "c2"], ["d", "d"], 1) == {"c1", "c2"}
    assert store.claim_commands(["c2", "c3"], ["d", "d"], 2) == {"c3"}


def test_jobs_that_ended_before_a_time_are_found_for_their_retention(store) -> None:
    import dataclasses

    ended = {"s": ("SUCCEEDED", 100), "k": ("KILLED", 300), "f": ("FAILED", 500), "r": ("RUNNING", None)}
    store.create_jobs([job(j) for j in ended], [])
    store.update_jobs([dataclasses.replace(job(j), state=state, completed_ms=at) for j, (state, at) in ended.items()])
    assert sorted(store.ended_jobs(400, 10)) == ["k", "s"]
    assert len(store.ended_jobs(400, 1)) == 1 and store.ended_jobs(100, 10) == []
    assert sorted(store.ended_jobs(10_000, 10)) == ["f", "k", "s"]  # never one still running


def test_commands_and_deleted_ids_are_forgotten_once_their_topic_cannot_hold_them(store) -> None:
    """Claims and refusals go by age, not with their job, and so do deleted jobs' ids; a store that
    expires_by_ttl (Cassandra) expires them by its tables' TTL."""
    from peloton.store import CLAIMS_KEPT_MS

    store.claim_commands(["old", "new"], ["d", "d"], 1_000)
    store.refuse_command("refused", "d", "/p", "CREATE", "no such pool", 1_000)
    store.claim_commands(["later"], ["d"], CLAIMS_KEPT_MS + 5_000)
    store.create_jobs([job("gone"), job("gone-later")], [])
    store.delete_job("gone", 1_000)
    store.delete_job("gone-later", CLAIMS_KEPT_MS + 5_000)
    if store.expires_by_ttl:
        assert store.forget_claims(CLAIMS_KEPT_MS + 2_000) == 0
        for table in ("job_commands", "refused_commands", "deleted_jobs"):
            ttl = store.session.execute("SELECT default_time_to_live FROM system_schema.tables WHERE keyspace_name "
                                        "= %s AND table_name = %s", (store.keyspace, table)).one()[0]
            assert ttl == CLAIMS_KEPT_MS // 1000
        return
    assert store.forget_claims(CLAIMS_KEPT_MS + 2_000) == 4
    assert store.command_outcome("refused") is None and store.command_outcome("later")["state"] == "applied"
    assert store.deleted_jobs(["gone", "gone-later"]) == {"gone-later": CLAIMS_KEPT_MS + 5_000}
    assert store.claim_commands(["old", "later"], ["d", "d"], CLAIMS_KEPT_MS + 6_000) == {"old"}
    assert store.forget_claims(CLAIMS_KEPT_MS + 2_000) == 0


def test_a_claim_outlives_every_command_job_commands_can_still_hold() -> None:
    """A command is in job-commands up to its retention plus a segment (the newest record of a
    segment must pass the retention before the segment goes): its claim must last longer."""
    from peloton.store import CLAIMS_KEPT_MS
    from peloton.topics import Catalogue

    config = dict(Catalogue()["job-commands"].config)
    assert int(config["retention.ms"]) + int(config["segment.ms"]) < CLAIMS_KEPT_MS


def test_an_allocation_charged_twice_is_held_once(store) -> None:
    store.add_allocations([Allocation("x", "/p", "g", 1, 2, 3, 0, 1)])
    store.add_allocations([Allocation("x", "/p", "g", 1, 2, 3, 0, 1)])
    assert store.allocations() == [Allocation("x", "/p", "g", 1, 2, 3, 0, 1)]


def test_a_run_ends_once_and_its_final_status_is_kept_for_replay(store) -> None:
    store.claim_launches([Launch("t-0-1", "t", 0, 1, "h", 1, 1, 1, 0, 5),
                          Launch("t-1-1", "t", 1, 1, "h", 1, 1, 1, 0, 5)])
    store.end_launches(["t-0-1"], 100, {"t-0-1": {"state": "TASK_FINISHED"}})
    store.end_launches(["t-0-1"], 200, {"t-0-1": {"state": "TASK_LOST"}})  # already ended: no change
    store.end_launches(["t-1-1"], 300, {"t-1-1": {"state": "TASK_FAILED"}})
    assert store.ended_launches(["h"], since_ms=0) == [{"state": "TASK_FINISHED"}, {"state": "TASK_FAILED"}]
    assert store.ended_launches(["h"], since_ms=150) == [{"state": "TASK_FAILED"}]
    assert store.ended_launches(["other"], since_ms=0) == []


def test_two_instances_creating_the_same_jobs_at_once_create_each_once(store, request, tmp_path) -> None:
    """Two stage instances on one store (two connections) race to create and to claim: the store
    decides, and each job and each launch belongs to exactly one of them."""
    import threading

    url = getattr(store, "url", None) or str(store.path)
    other = open_store(url)
    jobs = [job(f"j{i}") for i in range(200)]
    tasks = [task(j.job_id, 0) for j in jobs]
    results: list[set[str]] = [set(), set()]
    launches: list[set[str]] = [set(), set()]

    def race(s, i: int) -> None:
        for k in range(0, 200, 20):
            results[i] |= s.create_jobs(jobs[k:k + 20], tasks[k:k + 20])
            launches[i] |= s.claim_launches([Launch(t.task_id, t.job_id, 0, 1, "h", 1, 1, 1, 0, 5)
                                             for t in tasks[k:k + 20]])

    threads = [threading.Thread(target=race, args=(s, i)) for i, s in enumerate((store, other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert results[0] | results[1] == {j.job_id for j in jobs} and not results[0] & results[1]
    assert len(launches[0] | launches[1]) == 200 and not launches[0] & launches[1]
    assert all(len(store.tasks_of_job(j.job_id)) == 1 for j in jobs[:5])


def test_allocations_keep_what_admission_and_preemption_need(store) -> None:
    store.add_allocations([Allocation("t1", "/p", "g1", 1, 2, 3, 0, 10, priority=7, preemptible=False,
                                      revocable=True, controller=True)])
    (a,) = store.allocations()
    assert (a.priority, a.preemptible, a.revocable, a.controller) == (7, False, True, True)


def test_queued_gangs_survive_and_are_admitted_once(store) -> None:
    gang = {"gang_id": "g1", "pool": "/p", "tasks": [{"task_id": "t1"}]}
    rows = [QueuedGang("g1", "/p", 5, 2, gang), QueuedGang("g2", "/q", 0, 1, {"gang_id": "g2"}, not_before_ms=99)]
    store.queue_gangs(rows)
    store.queue_gangs([QueuedGang("g1", "/p", 5, 3, {"gang_id": "changed"})])  # queued already: kept as it was
    assert [(q.gang_id, q.seq, q.gang["gang_id"], q.not_before_ms) for q in store.queued_gangs()] == [
        ("g2", 1, "g2", 99), ("g1", 2, "g1", 0)]
    alloc = Allocation("t1", "/p", "g1", 1, 0, 0, 0, 10)
    assert store.admit_gangs(["g1"], [alloc]) == {"g1"}
    # A second instance that still believed it owned the pool admits nothing and charges nothing.
    assert store.admit_gangs(["g1"], [Allocation("t1b", "/p", "g1", 1, 0, 0, 0, 10)]) == set()
    assert [a.task_id for a in store.allocations()] == ["t1"]
    store.unqueue_gangs(["g2"])
    assert store.queued_gangs() == []
    # admitted, the gang waits in the outbox until its admission is known to be sent
    assert [(q.gang_id, q.gang["tasks"]) for q in store.unsent_admissions()] == [("g1", [{"task_id": "t1"}])]
    store.admissions_sent(["g1"])
    assert store.unsent_admissions() == []


def test_gangs_admitted_by_the_batch_that_brought_them_are_charged_without_a_queue_row(store) -> None:
    store.queue_gangs([QueuedGang("g1", "/p", 0, 1, {"gang_id": "g1"})])
    taken = store.admit_gangs(["g1"], [Allocation("t1", "/p", "g1", 1, 0, 0, 0, 10)],
                              [Allocation("t2", "/p", "g2", 2, 0, 0, 0, 10),
                               Allocation("t3", "/p", "g3", 3, 0, 0, 0, 10)])
    assert taken == {"g1"}
    assert sorted((a.task_id, a.cpu) for a in store.allocations()) == [("t1", 1), ("t2", 2), ("t3", 3)]
    assert [q.gang_id for q in store.unsent_admissions()] == ["g1"]  # only the queued one has an outbox row
    assert store.admit_gangs([], [], [Allocation("t4", "/p", "g4", 4, 0, 0, 0, 10)]) == set()
    assert store.allocation_states(["t4"]) == {"t4": "held"}


def test_the_queues_and_charges_of_some_pools_are_read_alone(store) -> None:
    store.queue_gangs([QueuedGang("g1", "/p", 0, 2, {"gang_id": "g1"}), QueuedGang("g2", "/q", 0, 1, {"gang_id": "g2"}),
                       QueuedGang("g3", "/p", 9, 3, {"gang_id": "g3"})])
    store.add_allocations([Allocation("t1", "/p", "g0", 1, 0, 0, 0, 10), Allocation("t2", "/r", "g9", 1, 0, 0, 0, 10)])
    assert [q.gang_id for q in store.queued_gangs(["/p", "/nowhere"])] == ["g1", "g3"]  # by seq
    assert [q.gang_id for q in store.queued_gangs(["/q", "/q"])] == ["g2"]
    assert store.queued_gangs([]) == [] and store.allocations([]) == []
    assert [a.task_id for a in store.allocations(["/r"])] == ["t2"]
    store.release_allocations(["t2"], 20)
    assert store.allocations(["/r"]) == [] and [a.task_id for a in store.allocations(["/p", "/r"])] == ["t1"]


def test_a_pool_knows_whether_pools_lie_below_it(store) -> None:
    for path in ("/", "/a", "/a/b", "/a/b/c", "/a-b", "/a0", "/ab", "/z"):
        store.put_pool(path, {"path": path})
    below = {path: store.has_pools_below(path) for path in ("/", "/a", "/a/b", "/a/b/c", "/a-b", "/a0", "/ab", "/z",
                                                               "/missing")}
    # "/a-b", "/a0" and "/ab" sort around "/a/" but lie beside /a, not below it
    assert below == {"/": True, "/a": True, "/a/b": True, "/a/b/c": False, "/a-b": False, "/a0": False,
                     "/ab": False, "/z": False, "/missing": False}


def test_pools_can_be_deleted_and_know_their_jobs(store) -> None:
    store.put_pool("/p", {"path": "/p"})
    store.create_jobs([job("j1")], [])
    assert store.pools_with_jobs() == {"/p"}
    assert store.delete_pool("/p") and not store.delete_pool("/p")
    assert store.list_pools() == {}


def test_tokens_are_kept_hashed_found_by_id_and_revoked_once(store) -> None:
    from peloton.auth.tokens import TokenError, issue, parts, token_id_of, verify

    token, row = issue("alice", ["team-a", "ops"], False, now_ms=5)
    store.add_token(row)
    found = store.get_token(token_id_of(token))
    # The secret is not kept. (Its whole self: a secret may hold `_`, and a short piece after the
    # last one, say "0", is found in any hex hash; this test failed once so.)
    assert found == row and parts(token)[1] not in found.secret_hash
    principal = verify(token, found)
    assert (principal.user, principal.groups, principal.admin) == ("alice", frozenset({"team-a", "ops"}), False)
    assert store.revoke_token(row.token_id, 9) and not store.revoke_token(row.token_id, 10)
    with pytest.raises(TokenError, match="revoked"):
        verify(token, store.get_token(row.token_id))
    assert [t.token_id for t in store.list_tokens()] == [row.token_id] and store.get_token("0" * 12) is None


def test_update_workflows_are_kept_whole_newest_first_and_go_with_their_job(store) -> None:
    store.create_jobs([job("u")], [task("u", 0)])
    first = {"update_id": "u1", "job_id": "u", "state": "ROLLING_FORWARD", "created_ms": 1, "runs": {"0": 1}}
    store.save_updates([first, {**first, "update_id": "u2", "created_ms": 2}])
    store.save_updates([{**first, "state": "ABORTED", "message": "superseded by u2"}])
    assert store.get_update("u1") == {**first, "state": "ABORTED", "message": "superseded by u2"}
    assert [u["update_id"] for u in store.updates_of_job("u")] == ["u2", "u1"]
    assert store.get_update("nope") is None
    store.save_job_configs([("u", 1, "v1", 1), ("u", 2, "v2", 2)])
    store.save_job_configs([("u", 2, "changed", 3)])  # a version stored stays as it was
    assert store.job_config("u", 2) == "v2" and store.job_config("u", 3) is None
    assert store.delete_job("u", 9)
    assert store.updates_of_job("u") == [] and store.job_config("u", 1) is None


def test_a_transaction_reads_what_it_wrote_and_writes_it_when_it_ends(store) -> None:
    """The stages read back, in one batch, what the batch wrote (a job created then stopped; runs
    ended then counted): every backend shows a transaction its own writes."""
    with store.transaction():
        store.create_jobs([job("a")], [task("a", 0), task("a", 1)])
        assert store.get_job("a").state == "PENDING" and len(store.tasks_of_job("a")) == 2
        t = store.tasks_by_instance([("a", 0)])[("a", 0)]
        t.state, t.host_id = "LAUNCHED", "h1"
        store.update_task_runs([t])
        assert store.task_state_counts(["a"]) == {"a": {"LAUNCHED": 1, "PENDING": 1}}
        assert [x.state for x in store.tasks_of_job("a")] == ["LAUNCHED", "PENDING"]
        assert store.tasks_by_instance([("a", 0)], spec=False)[("a", 0)].spec is None
        assert [x.instance for x in store.tasks_in_states(["LAUNCHED"], 10**15)] == [0]
        assert [x.instance for x in store.tasks_on_hosts(["h1"], ["LAUNCHED"])] == [0]
        j = store.get_job("a")
        j.state = "KILLED"
        store.update_jobs([j])
        assert store.active_jobs() == [] and store.get_job("a").state == "KILLED"
        assert store.claim_commands(["c1"], ["a"], 1) == {"c1"} and store.claim_commands(["c1"], ["a"], 1) == set()
        store.save_job_configs([("a", 2, "v2", 1)])
        assert store.job_config("a", 2) == "v2"
    assert store.get_job("a").state == "KILLED" and store.active_jobs() == []
    on_h1 = store.tasks_on_hosts(["h1"], ["LAUNCHED"])
    assert [(x.instance, x.state, x.host_id) for x in on_h1] == [(0, "LAUNCHED", "h1")]
    assert store.claim_commands(["c1"], ["a"], 2) == set() and store.job_config("a", 2) == "v2"


def test_an_index_row_left_by_a_moved_run_is_not_returned(store) -> None:
    """A run that left a state or a host is not found there any more (Cassandra's index tables
    are checked against the task when read)."""
    t = task("m", 0, "LAUNCHED")
    t.host_id = "h1"
    store.create_jobs([job("m")], [t])
    t.state, t.host_id = "RUNNING", "h2"
    store.update_task_runs([t])
    assert store.tasks_in_states(["LAUNCHED"], 10**15) == []
    assert store.tasks_on_hosts(["h1"], ["LAUNCHED", "RUNNING"]) == []
    assert [x.host_id for x in store.tasks_on_hosts(["h2"], ["RUNNING"])] == ["h2"]
    t.state, t.host_id = "LAUNCHED", "h1"  # and back: found again
    store.update_task_runs([t])
    assert [x.instance for x in store.tasks_in_states(["LAUNCHED"], 10**15)] == [0]
    assert [x.host_id for x in store.tasks_on_hosts(["h1"], ["LAUNCHED"])] == ["h1"]
    t.state = "KILLING"  # the job manager's takeover asks for these (its kills sent again)
    store.update_task_runs([t])
    assert [(x.instance, x.state) for x in store.tasks_in_states(["KILLING"], 10**15)] == [(0, "KILLING")]
    assert store.tasks_in_states(["LAUNCHED"], 10**15) == []


def test_a_jobs_alike_specs_are_read_back_each_with_its_own_identity(store) -> None:
    # Instances 0-2 alike but for their identity, 3 with a command of its own, and a second job
    # whose tasks are alike to the first's: every read gives each task its own spec.
    tasks = [TaskRow("a", i, 1, f"a-{i}-1", "/p", f"a-{i}-1", "PENDING", launch_spec_of("a", i)) for i in range(3)]
    tasks.append(TaskRow("a", 3, 1, "a-3-1", "/p", "a-3-1", "PENDING", launch_spec_of("a", 3, command="false")))
    tasks.append(TaskRow("b", 0, 1, "b-0-1", "/p", "b-0-1", "PENDING", launch_spec_of("b", 0)))
    store.create_jobs([job("a"), job("b")], tasks)
    want = {(t.job_id, t.instance): t.spec for t in tasks}
    assert {(t.job_id, t.instance): t.spec for t in store.tasks_of_job("a") + store.tasks_of_job("b")} == want
    assert list(store.tasks_of_job("a")[0].spec) == list(want[("a", 0)])  # identity first, as expand_job has it
    found = store.tasks_by_instance([("a", 1), ("a", 3), ("b", 0)])
    assert {k: t.spec for k, t in found.items()} == {k: want[k] for k in found}
    assert store.tasks_by_instance([("a", 1)], spec=False)[("a", 1)].spec is None
    assert {(t.job_id, t.instance): t.spec for t in store.unlaunched_tasks_of_jobs(["a", "b"])} == want
    moved = [TaskRow("a", i, 1, f"a-{i}-1", "/p", f"a-{i}-1", "LAUNCHING", None, host_id="h1", updated_ms=5)
             for i in (1, 3)]
    store.update_task_runs(moved, same_run=True)
    on_host = store.tasks_on_hosts(["h1"], ["LAUNCHING"])
    assert {(t.job_id, t.instance): t.spec for t in on_host} == {("a", 1): want[("a", 1)], ("a", 3): want[("a", 3)]}
    assert {(t.job_id, t.instance): t.spec for t in store.tasks_in_states(["LAUNCHING"], 10)} == \
        {("a", 1): want[("a", 1)], ("a", 3): want[("a", 3)]}
    # A retry's spec written over its row stays its own.
    again = store.tasks_by_instance([("a", 2)])[("a", 2)]
    again.run_id, again.task_id = 2, "a-2-2"
    again.spec = {**again.spec, "task_id": "a-2-2", "run_id": 2, "prefer_host": "h1"}
    store.save_tasks([again])
    assert store.tasks_of_job("a")[2].spec == again.spec
    assert store.delete_job("a", 9)
    assert store.tasks_of_job("a") == [] and store.tasks_of_job("b")[0].spec == want[("b", 0)]


def test_events_of_several_jobs_in_one_batch_keep_their_order_per_job(store) -> None:
    def event(job_id: str, instance: int, state: str, at: int) -> tuple:
        return (f"{job_id}-{instance}-1", job_id, instance, 1, state, "", None, at, "", "")

    store.record_task_events([event("a", 0, "READY", 1), event("b", 0, "READY", 2), event("a", 1, "READY", 3)])
    store.record_task_events([])
    store.record_task_events([event("a", 0, "RUNNING", 4)])
    assert [(e["job_id"], e["instance"], e["state"], e["timestamp_ms"]) for e in store.task_events("a")] == [
        ("a", 0, "READY", 1), ("a", 1, "READY", 3), ("a", 0, "RUNNING", 4)]
    assert [e["task_id"] for e in store.task_events("b")] == ["b-0-1"]


def test_host_pools_are_made_once_and_hosts_remember_their_pool_and_the_one_they_move_to(store) -> None:
    assert store.host_pools() == {}
    assert store.add_host_pool("gpu", 10, "alice") is True
    assert store.add_host_pool("gpu", 20, "bob") is False  # taken: the first stays
    assert store.host_pools() == {"gpu": {"created_ms": 10, "created_by": "alice"}}
    store.set_host_pool("h1", "default", "gpu", 30)
    store.set_host_pool("h1", "gpu", "gpu", 40)  # moved
    store.set_host_pool("h2", "default", "default", 40)
    assert store.host_pool_members() == {"h1": ("gpu", "gpu"), "h2": ("default", "default")}
    store.remove_host_pool("gpu")
    store.remove_host_pool("gpu")  # gone already: nothing to do
    assert store.host_pools() == {}


def test_volumes_are_recorded_once_listed_by_job_and_marked_deleted(store) -> None:
    from peloton.model.volumes import VolumeSpec, mount_record, volume_row

    rows = [volume_row(mount_record("j", i, VolumeSpec("data", 20), "h1"), "j", i, 10) for i in (1, 0)]
    store.add_volumes(rows)
    store.add_volumes([{**rows[0], "host_id": "h2", "created_ms": 99}])  # made once: the first stays
    assert [(v["volume_id"], v["host_id"], v["state"]) for v in store.list_volumes("j")] == [
        ("j-0", "h1", "CREATED"), ("j-1", "h1", "CREATED")]
    assert store.list_volumes("other") == [] and len(store.list_volumes()) == 2
    store.set_volume_state("j-1", "DELETED", 20)
    assert store.get_volume("j-1") == {"volume_id": "j-1", "job_id": "j", "instance": 1, "host_id": "h1",
                                       "container_path": "data", "size_mb": 20, "state": "DELETED",
                                       "created_ms": 10, "updated_ms": 20}
    assert store.get_volume("nope") is None
    store.add_volumes([{**rows[0], "host_id": "h3", "created_ms": 30, "updated_ms": 30}])  # made again after
    assert (store.get_volume("j-1")["state"], store.get_volume("j-1")["host_id"]) == ("CREATED", "h3")


def test_a_lockdown_is_kept_as_first_set_until_lifted(store) -> None:
    assert store.lockdown() == {}
    store.set_lockdown("Write", True, 10, "alice")
    store.set_lockdown("Write", True, 20, "bob")  # locked already: alice's lock stays
    store.set_lockdown("Kill", True, 30, "")
    assert store.lockdown() == {"Write": {"locked_ms": 10, "locked_by": "alice"},
                                "Kill": {"locked_ms": 30, "locked_by": ""}}
    store.set_lockdown("Write", False, 40, "alice")
    store.set_lockdown("Read", False, 40, "alice")  # not locked: nothing to lift
    assert list(store.lockdown()) == ["Kill"]
