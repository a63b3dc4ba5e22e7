"""Peloton's v0 JobManager over gRPC: Peloton's errors in its response fields, the API's
identities and pool permissions, every decision audited."""

from __future__ import annotations

import grpc
import pytest
import yaml
from google.protobuf import json_format

from peloton.api.v0 import peloton_pb2
from peloton.api.v0.job import job_pb2, job_pb2_grpc
from tests.builders.api import JOB


def config(pool: str) -> job_pb2.JobConfig:
    message = json_format.ParseDict(yaml.safe_load(JOB), job_pb2.JobConfig())
    message.respoolID.value = pool
    return message


def test_a_team_creates_in_its_pool_and_is_refused_elsewhere(port) -> None:
    jobs = job_pb2_grpc.JobManagerStub(port.channel)
    made = jobs.Create(job_pb2.CreateRequest(config=config("/a")), metadata=port.as_user("alice"))
    assert not made.HasField("error") and made.jobId.value
    [(_topic, key, _schema, command)] = port.out.take("job-commands")
    assert (key, command["kind"], command["pool"], command["requested_by"]) == (made.jobId.value, "CREATE", "/a",
                                                                                "alice")
    assert yaml.safe_load(command["config"])["instanceCount"] == 2
    with pytest.raises(grpc.RpcError) as refused:
        jobs.Create(job_pb2.CreateRequest(config=config("/b")), metadata=port.as_user("alice"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "job.create on /b refused" in refused.value.details()
    assert ("alice", "job.create", "/b", False) in port.decisions()


def test_errors_come_in_peloton_s_fields(port) -> None:
    jobs = job_pb2_grpc.JobManagerStub(port.channel)
    taken = jobs.Create(job_pb2.CreateRequest(id=peloton_pb2.JobID(value="j1"), config=config("/a")),
                        metadata=port.as_user("alice"))
    assert taken.error.HasField("alreadyExists") and "exists already" in taken.error.alreadyExists.message
    bad = config("/a")
    bad.instanceCount = 0
    bad.defaultConfig.ClearField("command")
    refused = jobs.Create(job_pb2.CreateRequest(config=bad), metadata=port.as_user("alice"))
    assert refused.error.HasField("invalidConfig") and "command" in refused.error.invalidConfig.message
    missing = jobs.Get(job_pb2.GetRequest(id=peloton_pb2.JobID(value="nope")), metadata=port.as_user("alice"))
    assert missing.error.notFound.id.value == "nope"
    assert port.out.take("job-commands") == []


def test_get_reads_the_stored_config_and_runtime(port) -> None:
    jobs = job_pb2_grpc.JobManagerStub(port.channel)
    got = jobs.Get(job_pb2.GetRequest(id=peloton_pb2.JobID(value="j1")), metadata=port.as_user("alice"))
    info = got.jobInfo
    assert (info.id.value, info.config.name, info.config.instanceCount) == ("j1", "hello", 2)
    assert info.config.respoolID.value == "/a" and info.config.defaultConfig.resource.cpuLimit == 0.5
    assert job_pb2.JobState.Name(info.runtime.state) == "PENDING" and dict(info.runtime.taskStats) == {"PENDING": 2}
    with pytest.raises(grpc.RpcError) as refused:
        jobs.Get(job_pb2.GetRequest(id=peloton_pb2.JobID(value="j1")), metadata=port.as_user("bob"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_calls_without_a_valid_token_are_unauthenticated(port) -> None:
    jobs = job_pb2_grpc.JobManagerStub(port.channel)
    for metadata in ((), (("authorization", "Basic abc"),), (("authorization", "Bearer plt_nope"),)):
        with pytest.raises(grpc.RpcError) as refused:
            jobs.Get(job_pb2.GetRequest(id=peloton_pb2.JobID(value="j1")), metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, metadata


def test_stop_by_half_open_range_and_a_stale_resource_version(port) -> None:
    jobs = job_pb2_grpc.JobManagerStub(port.channel)
    stop = job_pb2.StopRequest(id=peloton_pb2.JobID(value="j1"))
    stop.ranges.add(**{"from": 1, "to": 2})
    jobs.Stop(stop, metadata=port.as_user("alice"))
    [(_t, _k, _s, command)] = port.out.take("job-commands")
    assert (command["kind"], command["instances"]) == ("STOP", "1:2")
    stop.resourceVersion = 7
    with pytest.raises(grpc.RpcError) as stale:
        jobs.Stop(stop, metadata=port.as_user("alice"))
    assert stale.value.code() == grpc.StatusCode.ABORTED and "configuration version 1" in stale.value.details()


def test_methods_with_no_meaning_here_say_why(port) -> None:
    jobs = job_pb2_grpc.JobManagerStub(port.channel)
    with pytest.raises(grpc.RpcError) as refused:
        jobs.GetCache(job_pb2.GetCacheRequest(), metadata=port.as_user("alice"))
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED and "cache" in refused.value.details()


def test_query_returns_what_the_caller_may_read(port) -> None:
    jobs = job_pb2_grpc.JobManagerStub(port.channel)
    mine = jobs.Query(job_pb2.QueryRequest(), metadata=port.as_user("alice"))
    assert [r.id.value for r in mine.results] == ["j1"] and [r.id.value for r in mine.records] == ["j1"]
    assert jobs.Query(job_pb2.QueryRequest(summaryOnly=True), metadata=port.as_user("bob")).results == []
