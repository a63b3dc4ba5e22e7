"""Peloton's services with nothing to act on here answer UNIMPLEMENTED with why: v1alpha's
AdminService (lockdown). The VolumeServices are served (test_volumes.py)."""

from __future__ import annotations

import grpc
import pytest

from peloton.api.v1alpha.admin.svc import admin_svc_pb2, admin_svc_pb2_grpc


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

