"""Peloton's v1alpha PodService over gRPC: a pod (<job id>-<instance>) started, stopped and
restarted by a job command on that instance alone; read with its earlier runs and its events."""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from peloton.api.v1alpha import peloton_pb2
from peloton.api.v1alpha.pod import pod_pb2
from peloton.api.v1alpha.pod.svc import pod_svc_pb2 as svc
from peloton.api.v1alpha.pod.svc import pod_svc_pb2_grpc
from peloton.model.jobconfig import parse_job_config
from peloton.store.base import TaskEvent
from stages.admit.expand import expand_job


def name(value: str) -> peloton_pb2.PodName:
    return peloton_pb2.PodName(value=value)


def refused(call, request, metadata) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, metadata=metadata)
    return caught.value


def second_run(port) -> None:
    """Instance 0 of j1 failed its first run on h0 and runs its second there."""
    first = port.store.tasks_of_job("j1")[0]
    port.store.save_tasks([dataclasses.replace(first, run_id=2, task_id="j1-0-2", state="RUNNING", host_id="h0",
                                               failures=1, updated_ms=40)])
    port.store.record_task_events([
        TaskEvent("j1-0-1", "j1", 0, 1, "RUNNING", "", None, 10, "h0", ""),
        TaskEvent("j1-0-1", "j1", 0, 1, "FAILED", "REASON_COMMAND_EXECUTOR_FAILED", 3, 20, "h0", "exit 3"),
        TaskEvent("j1-0-2", "j1", 0, 2, "LAUNCHED", "", None, 30, "h0", ""),
        TaskEvent("j1-0-2", "j1", 0, 2, "RUNNING", "", None, 35, "h0", "")])


def test_pod_commands_act_on_that_instance_alone(port) -> None:
    pods = pod_svc_pb2_grpc.PodServiceStub(port.channel)
    pods.StopPod(svc.StopPodRequest(pod_name=name("j1-1")), metadata=port.as_user("alice"))
    pods.StartPod(svc.StartPodRequest(pod_name=name("j1-1")), metadata=port.as_user("alice"))
    pods.RestartPod(svc.RestartPodRequest(pod_name=name("j1-0")), metadata=port.as_user("alice"))
    sent = [c for _t, _k, _s, c in port.out.take("job-commands")]
    assert [(c["kind"], c["job_id"], c["instances"]) for c in sent] == [
        ("STOP", "j1", "1"), ("START", "j1", "1"), ("RESTART", "j1", "0")]
    other = refused(pods.StopPod, svc.StopPodRequest(pod_name=name("j1-0")), port.as_user("bob"))
    assert other.code() == grpc.StatusCode.PERMISSION_DENIED
    assert ("bob", "job.stop", "j1", False) in port.decisions()


def test_pod_names_are_checked(port) -> None:
    pods = pod_svc_pb2_grpc.PodServiceStub(port.channel)
    malformed = refused(pods.StopPod, svc.StopPodRequest(pod_name=name("j1")), port.as_user("alice"))
    assert malformed.code() == grpc.StatusCode.INVALID_ARGUMENT and "<job id>-<instance>" in malformed.details()
    beyond = refused(pods.StopPod, svc.StopPodRequest(pod_name=name("j1-7")), port.as_user("alice"))
    assert beyond.code() == grpc.StatusCode.NOT_FOUND and "j1-0 to j1-1" in beyond.details()
    nojob = refused(pods.GetPod, svc.GetPodRequest(pod_name=name("nope-0")), port.as_user("alice"))
    assert nojob.code() == grpc.StatusCode.NOT_FOUND
    assert port.out.take("job-commands") == []


def test_a_stopped_job_s_pod_stops_as_a_no_op(port) -> None:
    port.store.update_jobs([dataclasses.replace(port.store.get_job("j1"), state="KILLED", completed_ms=5)])
    pods = pod_svc_pb2_grpc.PodServiceStub(port.channel)
    pods.StopPod(svc.StopPodRequest(pod_name=name("j1-0")), metadata=port.as_user("alice"))
    assert port.out.take("job-commands") == []


def test_get_pod_answers_the_current_run_and_the_earlier_ones(port) -> None:
    second_run(port)
    pods = pod_svc_pb2_grpc.PodServiceStub(port.channel)
    got = pods.GetPod(svc.GetPodRequest(pod_name=name("j1-0")), metadata=port.as_user("alice"))
    now = got.current.status
    assert pod_pb2.PodState.Name(now.state) == "POD_STATE_RUNNING"
    assert pod_pb2.PodState.Name(now.desired_state) == "POD_STATE_SUCCEEDED"  # j1 is a batch job
    assert (now.pod_id.value, now.prev_pod_id.value, now.host, now.failure_count) == ("j1-0-2", "j1-0-1", "h0", 1)
    assert now.start_time == "1970-01-01T00:00:00.035Z" and now.version.value == "1-0-0"
    assert got.current.spec.pod_name.value == "j1-0" and got.current.spec.containers[0].resource.cpu_limit == 0.5
    [before] = got.previous
    assert (pod_pb2.PodState.Name(before.status.state), before.status.pod_id.value) == ("POD_STATE_FAILED", "j1-0-1")
    ended = before.status.containers_status[0].terminationStatus
    assert pod_pb2.TerminationStatus.Reason.Name(ended.reason) == "TERMINATION_STATUS_REASON_FAILED"
    assert ended.exit_code == 3 and before.status.completion_time == "1970-01-01T00:00:00.020Z"
    brief = pods.GetPod(svc.GetPodRequest(pod_name=name("j1-0"), status_only=True, limit=1),
                        metadata=port.as_user("alice"))
    assert not brief.current.HasField("spec") and not brief.previous
    hidden = refused(pods.GetPod, svc.GetPodRequest(pod_name=name("j1-0")), port.as_user("bob"))
    assert hidden.code() == grpc.StatusCode.PERMISSION_DENIED


def test_pod_events_of_a_run(port) -> None:
    second_run(port)
    pods = pod_svc_pb2_grpc.PodServiceStub(port.channel)
    current = pods.GetPodEvents(svc.GetPodEventsRequest(pod_name=name("j1-0")), metadata=port.as_user("alice"))
    assert [e.actual_state for e in current.events] == ["POD_STATE_LAUNCHED", "POD_STATE_RUNNING"]
    first = pods.GetPodEvents(svc.GetPodEventsRequest(pod_name=name("j1-0"), pod_id=peloton_pb2.PodID(value="j1-0-1")),
                              metadata=port.as_user("alice"))
    assert [(e.actual_state, e.hostname, e.message) for e in first.events] == [
        ("POD_STATE_RUNNING", "h0", ""), ("POD_STATE_FAILED", "h0", "exit 3")]
    assert first.events[1].pod_id.value == "j1-0-1" and first.events[1].timestamp == "1970-01-01T00:00:00.020Z"
    other = svc.GetPodEventsRequest(pod_name=name("j1-0"), pod_id=peloton_pb2.PodID(value="j1-1-1"))
    assert refused(pods.GetPodEvents, other, port.as_user("alice")).code() == grpc.StatusCode.INVALID_ARGUMENT
    later = svc.GetPodEventsRequest(pod_name=name("j1-0"), pod_id=peloton_pb2.PodID(value="j1-0-5"))
    assert refused(pods.GetPodEvents, later, port.as_user("alice")).code() == grpc.StatusCode.NOT_FOUND


def test_restart_with_check_sla_refuses_to_take_too_many_pods_down(port) -> None:
    text = ("name: web\ninstanceCount: 2\nsla: {maximumUnavailableInstances: 1}\ndefaultSpec:\n  containers:\n"
            "  - resource: {cpuLimit: 0.5, memLimitMb: 64, diskLimitMb: 64}\n    entrypoint: {value: sleep}\n")
    job, tasks = expand_job("s1", "/a", parse_job_config(text), text, 1)
    port.store.create_jobs([dataclasses.replace(job, type="SERVICE")],
                           [dataclasses.replace(tasks[0], state="RUNNING", host_id="h0"), tasks[1]])
    pods = pod_svc_pb2_grpc.PodServiceStub(port.channel)
    over = refused(pods.RestartPod, svc.RestartPodRequest(pod_name=name("s1-0"), check_sla=True),
                   port.as_user("alice"))
    assert over.code() == grpc.StatusCode.ABORTED and "maximumUnavailableInstances 1" in over.details()
    pods.RestartPod(svc.RestartPodRequest(pod_name=name("s1-1"), check_sla=True), metadata=port.as_user("alice"))
    assert [c["instances"] for _t, _k, _s, c in port.out.take("job-commands")] == ["1"]


def test_methods_with_no_meaning_here_say_why(port) -> None:
    pods = pod_svc_pb2_grpc.PodServiceStub(port.channel)
    sandbox = refused(pods.BrowsePodSandbox, svc.BrowsePodSandboxRequest(pod_name=name("j1-0")),
                      port.as_user("alice"))
    assert sandbox.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "/v1/jobs/{id}/tasks/{instance}/logs" in sandbox.details() and "pelotonctl task logs" in sandbox.details()
    events = refused(pods.DeletePodEvents, svc.DeletePodEventsRequest(pod_name=name("j1-0")), port.as_user("alice"))
    assert events.code() == grpc.StatusCode.UNIMPLEMENTED and "DeleteJob" in events.details()
    cache = refused(pods.GetPodCache, svc.GetPodCacheRequest(pod_name=name("j1-0")), port.as_user("alice"))
    assert cache.code() == grpc.StatusCode.UNIMPLEMENTED and "cache" in cache.details()
