"""Peloton's services with nothing to act on here answer UNIMPLEMENTED with why: v1alpha's
AdminService (lockdown) and both VolumeServices."""

from __future__ import annotations

import grpc
import pytest

from peloton.api.v0.volume.svc import volume_svc_pb2 as v0volume
from peloton.api.v0.volume.svc import volume_svc_pb2_grpc as v0volume_grpc
from peloton.api.v1alpha.admin.svc import admin_svc_pb2, admin_svc_pb2_grpc
from peloton.api.v1alpha.volume.svc import volume_svc_pb2 as v1volume
from peloton.api.v1alpha.volume.svc import volume_svc_pb2_grpc as v1volume_grpc


def refusal(method, request, port) -> str:
    with pytest.raises(grpc.RpcError) as refused:
        method(request, metadata=port.as_user("root"))
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    return refused.value.details()


def test_lockdown_is_not_served_there_being_nothing_to_lock(port) -> None:
    admin = admin_svc_pb2_grpc.AdminServiceStub(port.channel)
    components = [admin_svc_pb2.Write, admin_svc_pb2.Kill]
    assert "there is no lockdown here" in refusal(admin.Lockdown, admin_svc_pb2.LockdownRequest(
        components=components), port)
    assert "there is no lockdown here" in refusal(admin.RemoveLockdown, admin_svc_pb2.RemoveLockdownRequest(
        components=components), port)


def test_volumes_are_not_served_there_being_none_kept(port) -> None:
    for method, request in ((v0volume_grpc.VolumeServiceStub(port.channel).ListVolumes,
                             v0volume.ListVolumesRequest()),
                            (v0volume_grpc.VolumeServiceStub(port.channel).DeleteVolume,
                             v0volume.DeleteVolumeRequest()),
                            (v1volume_grpc.VolumeServiceStub(port.channel).GetVolume, v1volume.GetVolumeRequest())):
        reason = refusal(method, request, port)
        assert "persistent volumes are not kept here" in reason and "sandbox is its only disk" in reason


def test_a_task_s_volume_is_noted_not_refused_as_the_reason_says() -> None:
    """The reason's claim about job configs, checked against the parser."""
    from peloton.model.jobconfig import parse_job_config
    from tests.builders.api import JOB

    spec = parse_job_config(JOB.replace("  command:", "  volume: {containerPath: /data, sizeMB: 10}\n  command:"))
    assert any("volume" in notice and "not kept" in notice for notice in spec.notices)
