"""The host manager and persistent volumes: a run's volume is recorded on the host of its first
launch; a run placed away from its volume's host is refused, its room given back; a deleted
volume goes to its host's driver, or to the dead letters when no host of the shard is it."""

from __future__ import annotations

import time
import uuid

from peloton.model.volumes import VolumeSpec, mount_record
from stages.launch.stage import LaunchStage
from tests.builders.stages import bound, one_task_gang, placement_of, record


def with_volume(gang: dict, home: str = "") -> dict:
    t = gang["tasks"][0]
    t["volume"] = mount_record(t["job_id"], t["instance"], VolumeSpec("data", 20), home)
    return gang


def test_a_volume_is_recorded_where_its_first_run_launched_and_a_run_placed_elsewhere_is_refused(store) -> None:
    stage = LaunchStage(store)
    out = bound(stage, hosts="sim:2:cpu=8", sim_task_seconds=600)
    stage.on_assign([("placements", p) for p in range(4)])
    out.take()
    stage.handle([placement_of(with_volume(one_task_gang("v-0-1")), "sim-1")])
    assert [(v["volume_id"], v["host_id"]) for v in store.list_volumes("v")] == [("v-0", "sim-1")]
    stage.handle([placement_of(with_volume(one_task_gang("w-0-2"), home="sim-0"), "sim-1")])
    stage.tick(time.monotonic())
    dropped = [v for _, _, _, v in out.take("task-status") if v.get("task_id") == "w-0-2"]
    assert dropped and dropped[0]["message"] == "its volume w-0 is on host sim-0"
    assert "w-0-2" not in stage.book.ledgers["sim-1"].held.by_key and store.list_volumes("w") == []


def test_a_deleted_volume_goes_to_its_hosts_driver(store) -> None:
    stage = LaunchStage(store)
    out = bound(stage, hosts="sim:1:cpu=8", sim_task_seconds=600)
    stage.on_assign([("placements", p) for p in range(4)])
    asked = []
    stage.drivers["sim"].delete_volumes = lambda host_id, ids: asked.append((host_id, list(ids)))

    def delete(volume_id: str, host_id: str):
        return record("placements", "peloton.VolumeDelete", {"request_id": uuid.uuid4().hex, "volume_id": volume_id,
                                                             "host_id": host_id, "requested_by": "ops", "sent_ms": 1})
    stage.handle([delete("v-0", "sim-0"), delete("v-1", "elsewhere")])
    assert asked == [("sim-0", ["v-0"])]
    assert any("'elsewhere', which no host manager" in v["reason"] for _, _, _, v in out.take("dead-letters"))
