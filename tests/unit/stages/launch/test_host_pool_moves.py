"""The host manager moves hosts between host pools (Peloton's hostmgr hostpool change): an idle
host at once, a busy one after draining its runs, and the host-state it publishes carries the pool
as the `host_pool` label placement matches, whatever the host's agent says."""

from __future__ import annotations

import time
import uuid

from peloton.runtime import Record
from stages.launch.stage import LaunchStage
from tests.builders.stages import bound, one_task_gang, placement_of, record


def move(host_id: str, pool: str, source: str = "", at_once: bool = False) -> Record:
    return record("placements", "peloton.HostPoolChange", {
        "request_id": uuid.uuid4().hex, "host_id": host_id, "pool": pool, "source_pool": source,
        "at_once": at_once, "requested_by": "ops", "sent_ms": 1})


def published(out) -> dict[str, dict]:
    """host id -> its last HostState record sent."""
    return {key: v for _, key, _, v in out.take("host-state")}


def test_an_idle_host_moves_at_once_and_says_its_pool_in_its_labels(store) -> None:
    stage = LaunchStage(store)
    out = bound(stage, hosts="sim:2:cpu=8", sim_task_seconds=600)
    stage.on_assign([("placements", p) for p in range(4)])
    first = published(out)
    assert {h: v["labels"]["host_pool"] for h, v in first.items()} == {"sim-0": "default", "sim-1": "default"}
    stage.handle([move("sim-1", "gpu")])
    after = published(out)
    assert after["sim-1"]["labels"]["host_pool"] == "gpu" and after["sim-1"]["state"] == "UP"
    assert store.host_pool_members() == {"sim-1": ("gpu", "gpu")}
    # A new host manager of the shard reads the pool back from the store.
    again = LaunchStage(store)
    again_out = bound(again, hosts="sim:2:cpu=8", sim_task_seconds=600)
    again.on_assign([("placements", p) for p in range(4)])
    assert published(again_out)["sim-1"]["labels"]["host_pool"] == "gpu"


def test_a_busy_host_drains_then_changes_pool_and_is_up_again(store) -> None:
    stage = LaunchStage(store)
    out = bound(stage, hosts="sim:1:cpu=8", sim_task_seconds=600)
    stage.on_assign([("placements", p) for p in range(4)])
    stage.handle([placement_of(one_task_gang("b-0-1"))])
    stage.tick(time.monotonic())
    out.take()
    stage.handle([move("sim-0", "batch")])
    state = published(out)["sim-0"]
    assert (state["state"], state["labels"]["host_pool"]) == ("DRAINING", "default")
    assert store.host_pool_members() == {"sim-0": ("default", "batch")}
    stage.drivers["sim"].kill(["b-0-1"])  # the job manager moves the run away, as for maintenance
    for _ in range(3):
        stage.tick(time.monotonic())
    state = published(out)["sim-0"]
    assert (state["state"], state["labels"]["host_pool"]) == ("UP", "batch")
    assert store.host_pool_members() == {"sim-0": ("batch", "batch")} and store.host_states() == {}
    # Its pool deleted: back to the default pool at once, its runs staying.
    stage.handle([placement_of(one_task_gang("c-0-1"))])
    stage.tick(time.monotonic())
    stage.handle([move("sim-0", "default", at_once=True)])
    state = published(out)["sim-0"]
    assert (state["state"], state["labels"]["host_pool"], state["task_count"]) == ("UP", "default", 1)


def test_a_move_from_a_pool_the_host_is_not_in_goes_to_the_dead_letters(store) -> None:
    stage = LaunchStage(store)
    out = bound(stage, hosts="sim:1:cpu=8", sim_task_seconds=600)
    stage.on_assign([("placements", p) for p in range(4)])
    out.take()
    stage.handle([move("sim-0", "gpu", source="batch"), move("nowhere", "gpu")])
    reasons = [v["reason"] for _, _, _, v in out.take("dead-letters")]
    assert any("is in host pool 'default', not 'batch'" in r for r in reasons)
    assert any("'nowhere', which no host manager of this shard serves" in r for r in reasons)
    assert store.host_pool_members() == {}


def test_an_agents_own_host_pool_label_is_not_its_pool() -> None:
    from stages.launch.hosts import HostBook, host_state

    book = HostBook()
    spec = book.join("agent-9", 0, {"capacity": {"cpu": 8.0, "mem_mb": 1024.0, "disk_mb": 1000.0, "gpu": 0.0},
                                    "labels": {"host_pool": "gpu", "rack": "r1"}, "port_ranges": []}, {})
    labels = host_state(spec, book.ledgers["agent-9"], "UP", True, [], {}, 1, book.pool_of("agent-9"))["labels"]
    assert (labels["host_pool"], labels["rack"], labels["hostname"]) == ("default", "r1", "agent-9")
