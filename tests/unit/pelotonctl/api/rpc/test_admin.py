"""Peloton's v1alpha AdminService: an administrator locks Read, Write or Kill down and the API
refuses those calls, with who locked them, until the lockdown is removed; GoalStateEngine and
Launch answer a failure with why; nobody else may lock."""

from __future__ import annotations

import grpc
import pytest

from peloton.api.v0 import peloton_pb2
from peloton.api.v0.job import job_pb2, job_pb2_grpc
from peloton.api.v1alpha.admin.svc import admin_svc_pb2, admin_svc_pb2_grpc


def test_a_lockdown_refuses_what_it_locks_until_it_is_removed(port) -> None:
    admin = admin_svc_pb2_grpc.AdminServiceStub(port.channel)
    jobs = job_pb2_grpc.JobManagerStub(port.channel)
    get = job_pb2.GetRequest(id=peloton_pb2.JobID(value="j1"))
    with pytest.raises(grpc.RpcError) as refused:
        admin.Lockdown(admin_svc_pb2.LockdownRequest(components=[admin_svc_pb2.Read]), metadata=port.as_user("alice"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    locked = admin.Lockdown(admin_svc_pb2.LockdownRequest(components=[
        admin_svc_pb2.Read, admin_svc_pb2.GoalStateEngine]), metadata=port.as_user("root"))
    assert list(locked.successes) == [admin_svc_pb2.Read]
    [failure] = locked.failures
    assert failure.component == admin_svc_pb2.GoalStateEngine and "no goal-state engine" in failure.FailureMessage
    assert list(port.store.lockdown()) == ["Read"]
    with pytest.raises(grpc.RpcError) as frozen:
        jobs.Get(get, metadata=port.as_user("alice"))
    assert frozen.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "locked down for Read by root" in frozen.value.details() and "admin unlock Read" in frozen.value.details()
    removed = admin.RemoveLockdown(admin_svc_pb2.RemoveLockdownRequest(components=[admin_svc_pb2.Read]),
                                   metadata=port.as_user("root"))
    assert list(removed.successes) == [admin_svc_pb2.Read] and port.store.lockdown() == {}
    assert jobs.Get(get, metadata=port.as_user("alice")).jobInfo.id.value == "j1"
