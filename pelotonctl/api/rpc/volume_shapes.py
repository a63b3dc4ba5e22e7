"""Persistent volumes for v0's and v1alpha's VolumeService alike, through the HTTP API's volume
routes (the same permissions: reading a volume is reading its job, deleting one is job.delete on
its pool): a volume's row as v0's or v1alpha's PersistentVolumeInfo. A volume's goal state is its
state here (it is CREATED until deleted, then DELETED: no volume waits to be made or removed)."""

from __future__ import annotations

from typing import Any

import grpc

from peloton.api.v0.volume import volume_pb2 as v0
from peloton.api.v1alpha.volume import volume_pb2 as v1
from pelotonctl import admin
from pelotonctl.api.routes import volumes
from pelotonctl.api.rpc.calls import Call, Failed
from pelotonctl.api.rpc.convert import enum_value, rfc3339
from pelotonctl.api.rpc.v1_shapes import pod_name


def of_job(call: Call, job_id: str) -> list[dict]:
    """A job's volumes by instance (DELETED ones too); the job is required, as Peloton's is."""
    if not job_id.strip():
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, "job id: the job whose volumes to list is required")
    return volumes.list_volumes(call.creds, call.door, job=job_id.strip())["volumes"]


def one(call: Call, volume_id: str) -> dict:
    return volumes.get_volume(_required(volume_id), call.creds, call.door)


def delete(call: Call, volume_id: str) -> None:
    """Deletes the volume (one deleted already: nothing to do). A volume whose job has not ended
    is FAILED_PRECONDITION: the job may run its instance on it again."""
    try:
        volumes.delete_volume(_required(volume_id), call.creds, call.door)
    except admin.UserError as exc:
        if isinstance(exc, admin.NotFound):
            raise
        raise Failed(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None


def v0_info(row: dict, out: v0.PersistentVolumeInfo) -> v0.PersistentVolumeInfo:
    state = enum_value(v0.VolumeState, row["state"], "UNKNOWN")
    out.id.value, out.jobId.value, out.instanceId = row["volume_id"], row["job_id"], row["instance"]
    out.hostname, out.state, out.goalState = row["host_id"], state, state
    out.sizeMB, out.containerPath = row["size_mb"], row["container_path"]
    out.createTime, out.updateTime = rfc3339(row["created_ms"]), rfc3339(row["updated_ms"])
    return out


def v1_info(row: dict, out: v1.PersistentVolumeInfo) -> v1.PersistentVolumeInfo:
    state = enum_value(v1.VolumeState, f"VOLUME_STATE_{row['state']}", "VOLUME_STATE_INVALID")
    out.volume_id.value, out.pod_name.value = row["volume_id"], pod_name(row["job_id"], row["instance"])
    out.hostname, out.state, out.desired_state = row["host_id"], state, state
    out.size_mb, out.container_path = row["size_mb"], row["container_path"]
    out.create_time, out.update_time = rfc3339(row["created_ms"]), rfc3339(row["updated_ms"])
    return out


def _required(volume_id: str) -> str:
    if not volume_id.strip():
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, "volume id: the volume's id (<job id>-<instance>) is required")
    return volume_id.strip()


def fill(response: Any, rows: list[dict], info: Any) -> Any:
    """A ListVolumesResponse: its map of volume id to PersistentVolumeInfo."""
    for row in rows:
        info(row, response.volumes[row["volume_id"]])
    return response
