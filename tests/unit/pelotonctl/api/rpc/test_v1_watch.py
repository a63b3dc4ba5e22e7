"""Peloton's v1alpha WatchService over gRPC: the watch's id first, then only what changed in the
store, for the caller's jobs alone, until the client cancels or Cancel ends it."""

from __future__ import annotations

import dataclasses
import time

import grpc
import pytest

from peloton.api.v1alpha import peloton_pb2
from peloton.api.v1alpha.pod import pod_pb2
from peloton.api.v1alpha.watch import watch_pb2
from peloton.api.v1alpha.watch.svc import watch_svc_pb2 as svc
from peloton.api.v1alpha.watch.svc import watch_svc_pb2_grpc
from pelotonctl.api.rpc import v1_watch

J1 = peloton_pb2.JobID(value="j1")


@pytest.fixture(autouse=True)
def quick(monkeypatch) -> None:
    monkeypatch.setattr(v1_watch, "POLL_S", 0.05)


def run_task(port, instance: int, **changes) -> None:
    task = port.store.tasks_of_job("j1")[instance]
    port.store.update_task_runs([dataclasses.replace(task, updated_ms=task.updated_ms + 1, **changes)])


def watching() -> int:
    with v1_watch._LOCK:
        return len(v1_watch._WATCHES)


def until(predicate, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def test_a_pod_watch_sends_the_pods_that_change(port) -> None:
    watches = watch_svc_pb2_grpc.WatchServiceStub(port.channel)
    request = svc.WatchRequest(pod_filter=watch_pb2.PodFilter(job_id=J1))
    stream = watches.Watch(request, metadata=port.as_user("alice"), timeout=20)
    first = next(stream)
    assert first.watch_id and first.revision and not first.pods  # what was there already is not sent
    run_task(port, 1, state="RUNNING", host_id="h0")
    changed = next(stream)
    assert changed.watch_id == first.watch_id and changed.revision >= first.revision
    assert [p.pod_name.value for p in changed.pods] == ["j1-1"]
    assert pod_pb2.PodState.Name(changed.pods[0].status.state) == "POD_STATE_RUNNING"
    assert changed.pods[0].status.host == "h0"
    run_task(port, 0, state="LAUNCHED", host_id="h0")
    assert [p.pod_name.value for p in next(stream).pods] == ["j1-0"]
    stream.cancel()
    assert until(lambda: watching() == 0)  # the client went: so did the watch


def test_a_job_watch_sends_job_summaries(port) -> None:
    watches = watch_svc_pb2_grpc.WatchServiceStub(port.channel)
    stream = watches.Watch(svc.WatchRequest(stateless_job_filter=watch_pb2.StatelessJobFilter()),
                           metadata=port.as_user("alice"), timeout=20)
    assert not next(stream).stateless_jobs
    job = port.store.get_job("j1")
    port.store.update_jobs([dataclasses.replace(job, state="RUNNING", updated_ms=job.updated_ms + 1)])
    [summary] = next(stream).stateless_jobs
    assert (summary.job_id.value, summary.status.state) == ("j1", 3)  # JOB_STATE_RUNNING
    stream.cancel()


def test_jobs_named_that_are_not_there_or_deleted_are_said_so(port) -> None:
    watches = watch_svc_pb2_grpc.WatchServiceStub(port.channel)
    jobs = watch_pb2.StatelessJobFilter(job_ids=[J1, peloton_pb2.JobID(value="nope")])
    stream = watches.Watch(svc.WatchRequest(stateless_job_filter=jobs), metadata=port.as_user("alice"), timeout=20)
    assert [j.value for j in next(stream).stateless_jobs_not_found] == ["nope"]
    port.store.delete_job("j1", 10)
    assert [j.value for j in next(stream).stateless_jobs_not_found] == ["j1"]
    stream.cancel()


def test_a_watch_sees_only_what_its_caller_may_read(port) -> None:
    watches = watch_svc_pb2_grpc.WatchServiceStub(port.channel)
    named = svc.WatchRequest(pod_filter=watch_pb2.PodFilter(job_id=J1))
    with pytest.raises(grpc.RpcError) as refused:
        next(watches.Watch(named, metadata=port.as_user("bob"), timeout=20))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    stream = watches.Watch(svc.WatchRequest(pod_filter=watch_pb2.PodFilter()), metadata=port.as_user("bob"),
                           timeout=20)
    first = next(stream)
    run_task(port, 0, state="RUNNING")
    time.sleep(0.3)  # several polls: none of them sends j1's pod to bob
    watches.Cancel(svc.CancelRequest(watch_id=first.watch_id), metadata=port.as_user("bob"))
    with pytest.raises(grpc.RpcError) as ended:
        next(stream)
    assert ended.value.code() == grpc.StatusCode.CANCELLED


def test_cancel_ends_a_watch_of_the_caller_s(port) -> None:
    watches = watch_svc_pb2_grpc.WatchServiceStub(port.channel)
    stream = watches.Watch(svc.WatchRequest(pod_filter=watch_pb2.PodFilter(job_id=J1)),
                           metadata=port.as_user("alice"), timeout=20)
    watch_id = next(stream).watch_id
    for request, user in ((svc.CancelRequest(watch_id="nope"), "alice"), (svc.CancelRequest(watch_id=watch_id), "bob")):
        with pytest.raises(grpc.RpcError) as unknown:
            watches.Cancel(request, metadata=port.as_user(user))
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    watches.Cancel(svc.CancelRequest(watch_id=watch_id), metadata=port.as_user("alice"))
    with pytest.raises(grpc.RpcError) as ended:
        next(stream)
    assert ended.value.code() == grpc.StatusCode.CANCELLED and watch_id in ended.value.details()
    assert until(lambda: watching() == 0)


def test_what_a_watch_cannot_do(port) -> None:
    watches = watch_svc_pb2_grpc.WatchServiceStub(port.channel)
    for request, code in ((svc.WatchRequest(), grpc.StatusCode.INVALID_ARGUMENT),
                          (svc.WatchRequest(start_revision=5, pod_filter=watch_pb2.PodFilter()),
                           grpc.StatusCode.OUT_OF_RANGE)):
        with pytest.raises(grpc.RpcError) as refused:
            next(watches.Watch(request, metadata=port.as_user("alice"), timeout=20))
        assert refused.value.code() == code
    other = watch_pb2.PodFilter(job_id=J1, pod_names=[peloton_pb2.PodName(value="j2-0")])
    with pytest.raises(grpc.RpcError) as refused:
        next(watches.Watch(svc.WatchRequest(pod_filter=other), metadata=port.as_user("alice"), timeout=20))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a pod of" in refused.value.details()


def test_a_watch_of_every_pod_sees_what_the_counts_do_not_show(port) -> None:
    run_task(port, 0, state="RUNNING", host_id="h0", health="HEALTHY")
    watches = watch_svc_pb2_grpc.WatchServiceStub(port.channel)
    stream = watches.Watch(svc.WatchRequest(pod_filter=watch_pb2.PodFilter()), metadata=port.as_user("alice"),
                           timeout=20)
    next(stream)
    run_task(port, 0, health="UNHEALTHY")  # j1's row and its state counts stay as they were
    [pod] = next(stream).pods
    assert pod.pod_name.value == "j1-0"
    assert pod_pb2.HealthState.Name(pod.status.containers_status[0].healthy.state) == "HEALTH_STATE_UNHEALTHY"
    stream.cancel()
