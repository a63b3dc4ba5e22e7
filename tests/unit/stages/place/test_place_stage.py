"""Placement (PlaceStage) without a broker: records fed by hand, views given, output read from a
recording emitter: gangs refused, spread over host shards, sent back, and each step told to the job
manager before the next."""

from __future__ import annotations

import time

from peloton.runtime import StaticView
from stages.launch.stage import LaunchStage
from stages.place.stage import PlaceStage
from tests.builders.stages import bound, host_state, one_task_gang, placement_of, record


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
