"""Peloton's v0 TaskManager and UpdateService over gRPC: instances by half-open ranges, errors in
Peloton's response fields, updates sent as the HTTP API sends them and read back."""

from __future__ import annotations

import grpc
import pytest
import yaml
from google.protobuf import json_format

from peloton.api.v0 import peloton_pb2
from peloton.api.v0.job import job_pb2
from peloton.api.v0.task import task_pb2, task_pb2_grpc
from peloton.api.v0.update import update_pb2
from peloton.api.v0.update.svc import update_svc_pb2 as svc
from peloton.api.v0.update.svc import update_svc_pb2_grpc as svc_grpc
from stages.admit.workflow import UpdateOptions, new_workflow
from tests.builders.api import JOB

J1 = peloton_pb2.JobID(value="j1")


def test_tasks_are_read_listed_and_queried(port) -> None:
    tasks = task_pb2_grpc.TaskManagerStub(port.channel)
    me = port.as_user("alice")
    one = tasks.Get(task_pb2.GetRequest(jobId=J1, instanceId=1), metadata=me)
    assert (one.result.instanceId, task_pb2.TaskState.Name(one.result.runtime.state)) == (1, "PENDING")
    assert one.result.runtime.mesosTaskId.value.startswith("j1-1-")
    beyond = tasks.Get(task_pb2.GetRequest(jobId=J1, instanceId=5), metadata=me)
    assert beyond.outOfRange.instanceCount == 2
    listed = tasks.List(task_pb2.ListRequest(jobId=J1, range=task_pb2.InstanceRange(**{"from": 1, "to": 2})),
                        metadata=me)
    assert sorted(listed.result.value) == [1]
    assert sorted(tasks.List(task_pb2.ListRequest(jobId=J1), metadata=me).result.value) == [0, 1]
    pending = tasks.Query(task_pb2.QueryRequest(jobId=J1, spec=task_pb2.QuerySpec(taskStates=[task_pb2.PENDING])),
                          metadata=me)
    assert [r.instanceId for r in pending.records] == [0, 1] and pending.pagination.total == 2
    running = tasks.Query(task_pb2.QueryRequest(jobId=J1, spec=task_pb2.QuerySpec(taskStates=[task_pb2.RUNNING])),
                          metadata=me)
    assert list(running.records) == []
    missing = tasks.List(task_pb2.ListRequest(jobId=peloton_pb2.JobID(value="nope")), metadata=me)
    assert missing.notFound.id.value == "nope"
    with pytest.raises(grpc.RpcError) as refused:
        tasks.Get(task_pb2.GetRequest(jobId=J1, instanceId=0), metadata=port.as_user("bob"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_instances_stop_by_half_open_range(port) -> None:
    tasks = task_pb2_grpc.TaskManagerStub(port.channel)
    stopped = tasks.Stop(task_pb2.StopRequest(jobId=J1, ranges=[task_pb2.InstanceRange(**{"from": 0, "to": 1})]),
                         metadata=port.as_user("alice"))
    assert list(stopped.stoppedInstanceIds) == [0]
    [(_t, _k, _s, command)] = port.out.take("job-commands")
    assert (command["kind"], command["instances"], command["requested_by"]) == ("STOP", "0:1", "alice")
    beyond = tasks.Stop(task_pb2.StopRequest(jobId=J1, ranges=[task_pb2.InstanceRange(**{"from": 0, "to": 9})]),
                        metadata=port.as_user("alice"))
    assert beyond.error.outOfRange.instanceCount == 2 and port.out.take("job-commands") == []
    with pytest.raises(grpc.RpcError) as refused:
        tasks.Restart(task_pb2.RestartRequest(jobId=J1), metadata=port.as_user("bob"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert ("bob", "job.read", "j1", False) in port.decisions()


def test_updates_are_sent_read_and_steered(port) -> None:
    updates = svc_grpc.UpdateServiceStub(port.channel)
    me = port.as_user("alice")
    config = json_format.ParseDict(yaml.safe_load(JOB), job_pb2.JobConfig())
    config.instanceCount = 3
    made = updates.CreateUpdate(svc.CreateUpdateRequest(jobId=J1, jobConfig=config,
                                                        updateConfig=update_pb2.UpdateConfig(batchSize=1)), metadata=me)
    [(_t, _k, _s, command)] = port.out.take("job-commands")
    assert (command["kind"], command["batch_size"], made.updateID.value) == ("UPDATE", 1, command["command_id"])
    assert yaml.safe_load(command["config"])["instanceCount"] == 3
    with pytest.raises(grpc.RpcError) as refused:
        updates.CreateUpdate(svc.CreateUpdateRequest(jobId=J1, jobConfig=config, updateConfig=update_pb2.UpdateConfig(
            batchPercentage=10)), metadata=me)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "batchSize" in refused.value.details()
    port.store.save_updates([new_workflow("u1", "j1", "UPDATE", [0, 1, 2], UpdateOptions(batch_size=1), 1, 2,
                                          "alice", 5)])
    got = updates.GetUpdate(svc.GetUpdateRequest(updateId=peloton_pb2.UpdateID(value="u1")), metadata=me)
    info = got.updateInfo
    assert (update_pb2.State.Name(info.status.state), info.status.numTasksRemaining, info.config.batchSize,
            info.configVersion) == ("ROLLING_FORWARD", 3, 1, 2)
    assert [u.updateId.value for u in updates.ListUpdates(svc.ListUpdatesRequest(jobID=J1), metadata=me).updateInfo] \
        == ["u1"]
    updates.PauseUpdate(svc.PauseUpdateRequest(updateId=peloton_pb2.UpdateID(value="u1")), metadata=me)
    [(_t, _k, _s, pause)] = port.out.take("job-commands")
    assert pause["kind"] == "PAUSE"
    with pytest.raises(grpc.RpcError) as missing:
        updates.GetUpdate(svc.GetUpdateRequest(updateId=peloton_pb2.UpdateID(value="u9")), metadata=me)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
