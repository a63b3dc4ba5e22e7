"""Peloton's v0 and v1alpha VolumeService over gRPC, through the HTTP API's volume routes: a job's
volumes by id, one volume, and deleting one once its job has ended (FAILED_PRECONDITION before),
with the routes' permissions (job.read, job.delete on the job's pool). What a delete sends is
recorded (no broker)."""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from peloton.api.v0 import peloton_pb2 as v0ids
from peloton.api.v0.volume import volume_pb2
from peloton.api.v0.volume.svc import volume_svc_pb2 as svc
from peloton.api.v0.volume.svc import volume_svc_pb2_grpc
from peloton.api.v1alpha import peloton_pb2 as v1ids
from peloton.api.v1alpha.volume import volume_pb2 as v1volume
from peloton.api.v1alpha.volume.svc import volume_svc_pb2 as v1svc
from peloton.api.v1alpha.volume.svc import volume_svc_pb2_grpc as v1grpc
from peloton.model.volumes import VolumeSpec, mount_record, volume_row


@pytest.fixture
def v0(port) -> volume_svc_pb2_grpc.VolumeServiceStub:
    for instance, host in ((0, "h0"), (1, "h1")):
        port.store.add_volumes([volume_row(mount_record("j1", instance, VolumeSpec("data", 512), host), "j1",
                                           instance, 1_700_000_000_000)])
    return volume_svc_pb2_grpc.VolumeServiceStub(port.channel)


def end_job(port) -> None:
    port.store.update_jobs([dataclasses.replace(port.store.get_job("j1"), state="KILLED")])


def test_a_jobs_volumes_are_listed_and_read_in_pelotons_shapes(port, v0) -> None:
    listed = v0.ListVolumes(svc.ListVolumesRequest(jobId=v0ids.JobID(value="j1")), metadata=port.as_user("alice"))
    assert sorted(listed.volumes) == ["j1-0", "j1-1"]
    one = listed.volumes["j1-1"]
    assert (one.id.value, one.jobId.value, one.instanceId, one.hostname) == ("j1-1", "j1", 1, "h1")
    assert (one.state, one.goalState) == (volume_pb2.CREATED, volume_pb2.CREATED)
    assert (one.sizeMB, one.containerPath) == (512, "data")
    assert one.createTime == one.updateTime == "2023-11-14T22:13:20.000Z"
    got = v0.GetVolume(svc.GetVolumeRequest(id=v0ids.VolumeID(value="j1-0")), metadata=port.as_user("alice"))
    assert (got.result.id.value, got.result.hostname) == ("j1-0", "h0")
    v1 = v1grpc.VolumeServiceStub(port.channel)
    same = v1.GetVolume(v1svc.GetVolumeRequest(volume_id=v1ids.VolumeID(value="j1-0")),
                        metadata=port.as_user("alice")).result
    assert (same.volume_id.value, same.pod_name.value, same.hostname, same.size_mb, same.container_path) == (
        "j1-0", "j1-0", "h0", 512, "data")
    assert (same.state, same.desired_state) == (v1volume.VOLUME_STATE_CREATED, v1volume.VOLUME_STATE_CREATED)
    assert sorted(v1.ListVolumes(v1svc.ListVolumesRequest(job_id=v1ids.JobID(value="j1")),
                                 metadata=port.as_user("root")).volumes) == ["j1-0", "j1-1"]
    assert ("alice", "job.read", "j1", True) in port.decisions()


@pytest.mark.parametrize(("call", "code"), [
    (lambda v0, port: v0.GetVolume(svc.GetVolumeRequest(id=v0ids.VolumeID(value="j1-0")),
                                   metadata=port.as_user("bob")), grpc.StatusCode.PERMISSION_DENIED),
    (lambda v0, port: v0.ListVolumes(svc.ListVolumesRequest(jobId=v0ids.JobID(value="j1")),
                                     metadata=port.as_user("bob")), grpc.StatusCode.PERMISSION_DENIED),
    (lambda v0, port: v0.GetVolume(svc.GetVolumeRequest(id=v0ids.VolumeID(value="j1-0"))),
     grpc.StatusCode.UNAUTHENTICATED),
    (lambda v0, port: v0.GetVolume(svc.GetVolumeRequest(id=v0ids.VolumeID(value="j1-5")),
                                   metadata=port.as_user("alice")), grpc.StatusCode.NOT_FOUND),
    (lambda v0, port: v0.ListVolumes(svc.ListVolumesRequest(jobId=v0ids.JobID(value="nope")),
                                     metadata=port.as_user("alice")), grpc.StatusCode.NOT_FOUND),
    (lambda v0, port: v0.ListVolumes(svc.ListVolumesRequest(), metadata=port.as_user("alice")),
     grpc.StatusCode.INVALID_ARGUMENT),
    (lambda v0, port: v0.DeleteVolume(svc.DeleteVolumeRequest(), metadata=port.as_user("alice")),
     grpc.StatusCode.INVALID_ARGUMENT),
])
def test_what_may_not_be_read_or_is_not_there_answers_its_status(port, v0, call, code) -> None:
    with pytest.raises(grpc.RpcError) as failed:
        call(v0, port)
    assert failed.value.code() == code, failed.value.details()


def test_a_volume_is_deleted_once_its_job_has_ended(port, v0) -> None:
    request = svc.DeleteVolumeRequest(id=v0ids.VolumeID(value="j1-0"))
    with pytest.raises(grpc.RpcError) as early:
        v0.DeleteVolume(request, metadata=port.as_user("alice"))
    assert early.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "job j1, which is PENDING: the instance may run, or run again, on it" in early.value.details()
    end_job(port)
    with pytest.raises(grpc.RpcError) as refused:
        v0.DeleteVolume(request, metadata=port.as_user("bob"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert port.out.take("placements") == []
    v0.DeleteVolume(request, metadata=port.as_user("alice"))
    [(_t, key, schema, sent)] = port.out.take("placements")
    assert (key, schema, sent["volume_id"], sent["requested_by"]) == ("h0", "peloton.VolumeDelete", "j1-0", "alice")
    v1 = v1grpc.VolumeServiceStub(port.channel)
    v1.DeleteVolume(v1svc.DeleteVolumeRequest(volume_id=v1ids.VolumeID(value="j1-0")),
                    metadata=port.as_user("alice"))  # deleted already: nothing more to do
    assert port.out.take("placements") == []
    got = v0.GetVolume(svc.GetVolumeRequest(id=v0ids.VolumeID(value="j1-0")), metadata=port.as_user("alice"))
    assert (got.result.state, got.result.goalState) == (volume_pb2.DELETED, volume_pb2.DELETED)
    assert ("bob", "job.delete", "j1-0", False) in port.decisions()


def test_a_jobs_deletion_over_grpc_deletes_its_volumes(port, v0) -> None:
    from peloton.api.v0.job import job_pb2, job_pb2_grpc

    end_job(port)
    job_pb2_grpc.JobManagerStub(port.channel).Delete(job_pb2.DeleteRequest(id=v0ids.JobID(value="j1")),
                                                     metadata=port.as_user("alice"))
    assert [(key, sent["volume_id"]) for _t, key, _s, sent in port.out.take("placements")] == [("h0", "j1-0"),
                                                                                             ("h1", "j1-1")]
    assert {v["state"] for v in port.store.list_volumes("j1")} == {"DELETED"}
