"""Peloton's v0 VolumeService (peloton.api.v0.volume.svc): the persistent volumes of stateful
jobs, listed by job, read and deleted through the HTTP API's volume routes (volume_shapes.py)."""

from __future__ import annotations

from peloton.api.v0.volume.svc import volume_svc_pb2 as svc
from pelotonctl.api.rpc import volume_shapes
from pelotonctl.api.rpc.calls import Call
from pelotonctl.api.rpc.catalog import served

SERVICE = "peloton.api.v0.volume.svc.VolumeService"


@served(f"{SERVICE}/ListVolumes")
def list_volumes(call: Call, request: svc.ListVolumesRequest) -> svc.ListVolumesResponse:
    """A job's volumes, keyed by volume id, DELETED ones too (job.read on the job's pool)."""
    return volume_shapes.fill(svc.ListVolumesResponse(), volume_shapes.of_job(call, request.jobId.value),
                              volume_shapes.v0_info)


@served(f"{SERVICE}/GetVolume")
def get_volume(call: Call, request: svc.GetVolumeRequest) -> svc.GetVolumeResponse:
    """One volume: its job and instance, host, size, path in the sandbox, state and times."""
    response = svc.GetVolumeResponse()
    volume_shapes.v0_info(volume_shapes.one(call, request.id.value), response.result)
    return response


@served(f"{SERVICE}/DeleteVolume")
def delete_volume(call: Call, request: svc.DeleteVolumeRequest) -> svc.DeleteVolumeResponse:
    """Deletes a volume of a job that has ended or is gone: its directory is removed from its host
    (job.delete on the job's pool; administrators for a job that is gone)."""
    volume_shapes.delete(call, request.id.value)
    return svc.DeleteVolumeResponse()
