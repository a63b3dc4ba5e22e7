"""Peloton's v1alpha stateless JobService over gRPC: errors as gRPC statuses, writes checked against
the entity version they read, the HTTP API's commands sent, streams that stream."""

from __future__ import annotations

import dataclasses

import grpc
import pytest
import yaml
from google.protobuf import json_format

from peloton.api.v1alpha import peloton_pb2
from peloton.api.v1alpha.job.stateless import stateless_pb2
from peloton.api.v1alpha.job.stateless.svc import stateless_svc_pb2 as svc
from peloton.api.v1alpha.job.stateless.svc import stateless_svc_pb2_grpc
from peloton.api.v1alpha.pod import pod_pb2
from peloton.model.constraint import LabelConstraint
from peloton.model.jobconfig import parse_job_config
from pelotonctl.api.rpc import v1_stateless_reads
from stages.admit.expand import expand_job
from stages.admit.workflow import UpdateOptions, new_workflow

SPEC = """name: web
instanceCount: 2
sla: {maximumUnavailableInstances: 1}
defaultSpec:
  containers:
  - resource: {cpuLimit: 0.5, memLimitMb: 64, diskLimitMb: 64}
    entrypoint: {value: sleep, arguments: ["100"]}
"""
J1 = peloton_pb2.JobID(value="j1")
S1 = peloton_pb2.JobID(value="s1")


def spec(text: str = SPEC, pool: str = "/a") -> stateless_pb2.JobSpec:
    message = json_format.ParseDict(yaml.safe_load(text), stateless_pb2.JobSpec())
    message.respool_id.value = pool
    return message


def service(port, job_id: str = "s1", text: str = SPEC) -> None:
    """A stateless job as the job manager would have stored it."""
    job, tasks = expand_job(job_id, "/a", parse_job_config(text), text, 1)
    job.type = "SERVICE"
    port.store.create_jobs([job], tasks)


def with_workflow(port, job_id: str = "s1", kind: str = "UPDATE") -> dict:
    """The job with a workflow in progress, as the job manager keeps one."""
    wf = new_workflow("u1", job_id, kind, [0, 1], UpdateOptions(batch_size=1), 1, 2 if kind == "UPDATE" else 1,
                      "alice", 5)
    job = port.store.get_job(job_id)
    port.store.update_jobs([dataclasses.replace(job, rollout=wf, config_version=wf["to_version"])])
    port.store.save_updates([wf])
    return wf


def commands(port) -> list[dict]:
    return [c for _t, _k, _s, c in port.out.take("job-commands")]


def refused(call, request, metadata) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, metadata=metadata)
    return caught.value


def test_create_sends_the_spec_and_answers_the_id_and_version(port) -> None:
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    made = jobs.CreateJob(svc.CreateJobRequest(job_id=peloton_pb2.JobID(value="web1"), spec=spec()),
                          metadata=port.as_user("alice"))
    assert (made.job_id.value, made.version.value) == ("web1", "1-0-0")
    [command] = commands(port)
    assert (command["kind"], command["job_id"], command["pool"], command["requested_by"]) == ("CREATE", "web1", "/a",
                                                                                              "alice")
    sent = yaml.safe_load(command["config"])
    assert "respoolId" not in sent and sent["defaultSpec"]["containers"][0]["entrypoint"]["value"] == "sleep"
    taken = refused(jobs.CreateJob, svc.CreateJobRequest(job_id=J1, spec=spec()), port.as_user("alice"))
    assert taken.code() == grpc.StatusCode.ALREADY_EXISTS and "exists already" in taken.details()
    nowhere = refused(jobs.CreateJob, svc.CreateJobRequest(spec=spec(pool="/nope")), port.as_user("alice"))
    assert nowhere.code() == grpc.StatusCode.NOT_FOUND
    elsewhere = refused(jobs.CreateJob, svc.CreateJobRequest(spec=spec(pool="/b")), port.as_user("alice"))
    assert elsewhere.code() == grpc.StatusCode.PERMISSION_DENIED and "job.create on /b refused" in elsewhere.details()
    bad = spec()
    bad.default_spec.containers[0].ClearField("entrypoint")
    invalid = refused(jobs.CreateJob, svc.CreateJobRequest(spec=bad), port.as_user("alice"))
    assert invalid.code() == grpc.StatusCode.INVALID_ARGUMENT and "command" in invalid.details()
    secret = svc.CreateJobRequest(spec=spec(), secrets=[peloton_pb2.Secret(path="/s")])
    assert refused(jobs.CreateJob, secret, port.as_user("alice")).code() == grpc.StatusCode.INVALID_ARGUMENT
    assert commands(port) == []


def test_a_spec_with_v1alpha_s_constraint_names_is_taken(port) -> None:
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    pinned = spec()
    pinned.default_spec.constraint.type = pod_pb2.Constraint.CONSTRAINT_TYPE_LABEL
    label = pinned.default_spec.constraint.label_constraint
    label.kind, label.condition = pod_pb2.LabelConstraint.LABEL_CONSTRAINT_KIND_POD, \
        pod_pb2.LabelConstraint.LABEL_CONSTRAINT_CONDITION_LESS_THAN
    label.label.key, label.label.value, label.requirement = "app", "web", 1
    jobs.CreateJob(svc.CreateJobRequest(spec=pinned), metadata=port.as_user("alice"))
    [command] = commands(port)
    assert parse_job_config(command["config"]).tasks[0].constraint == LabelConstraint("TASK", "LESS_THAN", "app",
                                                                                      "web", 1)


def test_replace_checks_the_entity_version_and_sends_the_update_spec(port) -> None:
    service(port)
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    version = jobs.GetJob(svc.GetJobRequest(job_id=S1), metadata=port.as_user("alice")).job_info.status.version
    assert version.value == "1-0-0"
    bigger = spec(SPEC.replace("instanceCount: 2", "instanceCount: 3"))
    update = stateless_pb2.UpdateSpec(batch_size=1, max_tolerable_instance_failures=2, rollback_on_failure=True,
                                      max_instance_retries=3, start_paused=True, in_place=True)
    answer = jobs.ReplaceJob(svc.ReplaceJobRequest(job_id=S1, version=version, spec=bigger, update_spec=update),
                             metadata=port.as_user("alice"))
    assert answer.version.value == "1-0-0"  # the job manager has not taken it (none runs here)
    [command] = commands(port)
    assert command["kind"] == "UPDATE" and yaml.safe_load(command["config"])["instanceCount"] == 3
    assert (command["batch_size"], command["max_failure_instances"], command["max_instance_retries"],
            command["rollback_on_failure"], command["start_paused"], command["in_place"]) == (1, 2, 3, True, True, True)
    with_workflow(port)  # the job manager took an update since: what was read is stale
    stale = refused(jobs.ReplaceJob, svc.ReplaceJobRequest(job_id=S1, version=version, spec=bigger),
                    port.as_user("alice"))
    assert stale.code() == grpc.StatusCode.ABORTED
    assert stale.details() == "entity version 1-0-0 is stale: the job is at 2-0-1; read it again"
    malformed = svc.ReplaceJobRequest(job_id=S1, version=peloton_pb2.EntityVersion(value="v2"), spec=bigger)
    assert refused(jobs.ReplaceJob, malformed, port.as_user("alice")).code() == grpc.StatusCode.INVALID_ARGUMENT
    moved = svc.ReplaceJobRequest(job_id=S1, spec=spec(pool="/b"))
    assert "between pools" in refused(jobs.ReplaceJob, moved, port.as_user("alice")).details()
    assert commands(port) == []


def test_a_batch_job_is_not_replaced_by_a_stateless_spec(port) -> None:
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    wrong = refused(jobs.ReplaceJob, svc.ReplaceJobRequest(job_id=J1, spec=spec()), port.as_user("alice"))
    assert wrong.code() == grpc.StatusCode.INVALID_ARGUMENT and "type: cannot change" in wrong.details()


def test_patch_merges_onto_the_stored_spec(port) -> None:
    service(port)
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    patch = stateless_pb2.JobSpec(instance_count=3)
    patch.default_spec.containers.add().resource.cpu_limit = 1.0
    jobs.PatchJob(svc.PatchJobRequest(job_id=S1, spec=patch), metadata=port.as_user("alice"))
    [command] = commands(port)
    sent = yaml.safe_load(command["config"])
    container = sent["defaultSpec"]["containers"][0]
    assert (command["kind"], sent["instanceCount"], sent["name"]) == ("UPDATE", 3, "web")
    assert container["resource"] == {"cpuLimit": 1.0, "memLimitMb": 64, "diskLimitMb": 64}
    assert container["entrypoint"] == {"value": "sleep", "arguments": ["100"]}
    v0 = stateless_pb2.JobSpec()
    v0.default_spec.containers.add().resource.cpu_limit = 1.0
    onto_v0 = refused(jobs.PatchJob, svc.PatchJobRequest(job_id=J1, spec=v0), port.as_user("alice"))
    assert onto_v0.code() == grpc.StatusCode.INVALID_ARGUMENT and "v0 job config" in onto_v0.details()


def test_pause_resume_and_abort_steer_the_workflow_in_progress(port) -> None:
    service(port)
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    none = refused(jobs.PauseJobWorkflow, svc.PauseJobWorkflowRequest(job_id=S1), port.as_user("alice"))
    assert none.code() == grpc.StatusCode.FAILED_PRECONDITION and "no workflow in progress" in none.details()
    with_workflow(port)
    paused = jobs.PauseJobWorkflow(svc.PauseJobWorkflowRequest(job_id=S1, version=peloton_pb2.EntityVersion(
        value="2-0-1")), metadata=port.as_user("alice"))
    assert paused.version.value == "2-0-1"
    not_paused = refused(jobs.ResumeJobWorkflow, svc.ResumeJobWorkflowRequest(job_id=S1), port.as_user("alice"))
    assert not_paused.code() == grpc.StatusCode.FAILED_PRECONDITION and "not paused" in not_paused.details()
    jobs.AbortJobWorkflow(svc.AbortJobWorkflowRequest(job_id=S1), metadata=port.as_user("alice"))
    assert [(c["kind"], c["update_id"], c["requested_by"]) for c in commands(port)] == [
        ("PAUSE", "u1", "alice"), ("ABORT", "u1", "alice")]
    other = refused(jobs.AbortJobWorkflow, svc.AbortJobWorkflowRequest(job_id=S1), port.as_user("bob"))
    assert other.code() == grpc.StatusCode.PERMISSION_DENIED
    assert ("bob", "job.read", "s1", False) in port.decisions()


def test_restart_start_stop_and_delete(port) -> None:
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    restart = stateless_pb2.RestartSpec(batch_size=1, in_place=True, ranges=[pod_pb2.InstanceIDRange(to=2)])
    setattr(restart.ranges[0], "from", 1)
    jobs.RestartJob(svc.RestartJobRequest(job_id=J1, restart_spec=restart), metadata=port.as_user("alice"))
    jobs.StopJob(svc.StopJobRequest(job_id=J1), metadata=port.as_user("alice"))
    jobs.StartJob(svc.StartJobRequest(job_id=J1), metadata=port.as_user("alice"))
    sent = commands(port)
    assert [(c["kind"], c["instances"]) for c in sent] == [("RESTART", "1:2"), ("STOP", None), ("START", None)]
    assert (sent[0]["batch_size"], sent[0]["in_place"]) == (1, True)
    running = refused(jobs.DeleteJob, svc.DeleteJobRequest(job_id=J1, force=True), port.as_user("alice"))
    assert running.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "only a terminal job is deleted" in running.details() and "force does not stop" in running.details()
    port.store.update_jobs([dataclasses.replace(port.store.get_job("j1"), state="KILLED", completed_ms=9)])
    jobs.DeleteJob(svc.DeleteJobRequest(job_id=J1), metadata=port.as_user("alice"))
    assert [c["kind"] for c in commands(port)] == ["DELETE"]
    missing = refused(jobs.StopJob, svc.StopJobRequest(job_id=peloton_pb2.JobID(value="nope")), port.as_user("alice"))
    assert missing.code() == grpc.StatusCode.NOT_FOUND


def test_get_job_reads_a_v0_config_as_a_stateless_spec(port) -> None:
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    info = jobs.GetJob(svc.GetJobRequest(job_id=J1), metadata=port.as_user("alice")).job_info
    container = info.spec.default_spec.containers[0]
    assert (info.spec.name, info.spec.instance_count, info.spec.respool_id.value) == ("hello", 2, "/a")
    assert (container.resource.cpu_limit, container.command.value) == (0.5, "echo hello")
    status = info.status
    assert stateless_pb2.JobState.Name(status.state) == "JOB_STATE_PENDING"
    assert stateless_pb2.JobState.Name(status.desired_state) == "JOB_STATE_SUCCEEDED"
    assert dict(status.pod_stats) == {"POD_STATE_PENDING": 2} and status.version.value == "1-0-0"
    summary = jobs.GetJob(svc.GetJobRequest(job_id=J1, summary_only=True), metadata=port.as_user("alice"))
    assert not summary.HasField("job_info") and summary.summary.name == "hello"
    old = refused(jobs.GetJob, svc.GetJobRequest(job_id=J1, version=peloton_pb2.EntityVersion(value="2-0-0")),
                  port.as_user("alice"))
    assert old.code() == grpc.StatusCode.NOT_FOUND and "no config version 2" in old.details()
    assert refused(jobs.GetJob, svc.GetJobRequest(job_id=J1), port.as_user("bob")).code() == \
        grpc.StatusCode.PERMISSION_DENIED


def test_get_job_answers_the_workflow_and_a_stateless_spec(port) -> None:
    service(port)
    with_workflow(port)
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    got = jobs.GetJob(svc.GetJobRequest(job_id=S1), metadata=port.as_user("alice"))
    container = got.job_info.spec.default_spec.containers[0]
    assert (container.entrypoint.value, list(container.entrypoint.arguments)) == ("sleep", ["100"])
    assert got.job_info.spec.sla.maximum_unavailable_instances == 1
    workflow = got.workflow_info.status
    assert stateless_pb2.WorkflowState.Name(workflow.state) == "WORKFLOW_STATE_ROLLING_FORWARD"
    assert (workflow.version.value, workflow.prev_version.value) == ("2-0-1", "1-0-0")
    assert got.workflow_info.update_spec.batch_size == 1
    assert got.job_info.status.workflow_status == workflow
    listed = jobs.ListJobWorkflows(svc.ListJobWorkflowsRequest(job_id=S1, instance_events=True),
                                   metadata=port.as_user("alice"))
    assert [w.status.version.value for w in listed.workflow_infos] == ["2-0-1"]
    assert [e.instance_id for e in listed.workflow_infos[0].instance_events] == [0, 1]
    events = jobs.GetWorkflowEvents(svc.GetWorkflowEventsRequest(job_id=S1, instance_id=1),
                                    metadata=port.as_user("alice"))
    assert [stateless_pb2.WorkflowState.Name(e.state) for e in events.events] == ["WORKFLOW_STATE_ROLLING_FORWARD"]


def test_job_ids_by_name_of_jobs_the_caller_may_read(port) -> None:
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    found = jobs.GetJobIDFromJobName(svc.GetJobIDFromJobNameRequest(job_name="hello"), metadata=port.as_user("alice"))
    assert [j.value for j in found.job_id] == ["j1"]
    hidden = refused(jobs.GetJobIDFromJobName, svc.GetJobIDFromJobNameRequest(job_name="hello"), port.as_user("bob"))
    assert hidden.code() == grpc.StatusCode.NOT_FOUND


def test_list_jobs_streams_what_the_caller_may_read(port, monkeypatch) -> None:
    monkeypatch.setattr(v1_stateless_reads, "CHUNK", 2)
    for n in range(4):
        service(port, f"s{n}")
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    answers = list(jobs.ListJobs(svc.ListJobsRequest(), metadata=port.as_user("alice")))
    assert [len(a.jobs) for a in answers] == [2, 2, 1]
    assert sorted(j.job_id.value for a in answers for j in a.jobs) == ["j1", "s0", "s1", "s2", "s3"]
    assert [len(a.jobs) for a in jobs.ListJobs(svc.ListJobsRequest(), metadata=port.as_user("bob"))] == []


def test_list_and_query_pods(port, monkeypatch) -> None:
    monkeypatch.setattr(v1_stateless_reads, "CHUNK", 1)
    task = port.store.tasks_of_job("j1")[0]
    port.store.update_task_runs([dataclasses.replace(task, state="RUNNING", host_id="h0", updated_ms=7)])
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    answers = list(jobs.ListPods(svc.ListPodsRequest(job_id=J1), metadata=port.as_user("alice")))
    assert [[p.pod_name.value for p in a.pods] for a in answers] == [["j1-0"], ["j1-1"]]
    assert pod_pb2.PodState.Name(answers[0].pods[0].status.state) == "POD_STATE_RUNNING"
    assert answers[0].pods[0].status.pod_id.value == "j1-0-1" and answers[0].pods[0].status.host == "h0"
    ranged = svc.ListPodsRequest(job_id=J1)
    setattr(ranged.range, "from", 1)
    assert [p.pod_name.value for a in jobs.ListPods(ranged, metadata=port.as_user("alice")) for p in a.pods] == [
        "j1-1"]
    running = svc.QueryPodsRequest(job_id=J1, spec=pod_pb2.QuerySpec(pod_states=[pod_pb2.POD_STATE_RUNNING]))
    found = jobs.QueryPods(running, metadata=port.as_user("alice"))
    assert [p.spec.pod_name.value for p in found.pods] == ["j1-0"] and found.pagination.total == 1
    assert found.pods[0].spec.containers[0].command.value == "echo hello"
    named = svc.QueryPodsRequest(job_id=J1, summary_only=True,
                                 spec=pod_pb2.QuerySpec(names=[peloton_pb2.PodName(value="j1-1")]))
    assert [p.status.pod_id.value for p in jobs.QueryPods(named, metadata=port.as_user("alice")).pods] == ["j1-1-1"]
    with pytest.raises(grpc.RpcError) as hidden:
        list(jobs.ListPods(svc.ListPodsRequest(job_id=J1), metadata=port.as_user("bob")))
    assert hidden.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_query_jobs(port) -> None:
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    pending = stateless_pb2.QuerySpec(job_states=[stateless_pb2.JOB_STATE_PENDING])
    mine = jobs.QueryJobs(svc.QueryJobsRequest(spec=pending), metadata=port.as_user("alice"))
    assert [r.job_id.value for r in mine.records] == ["j1"] and mine.spec == pending
    running = stateless_pb2.QuerySpec(job_states=[stateless_pb2.JOB_STATE_RUNNING])
    assert jobs.QueryJobs(svc.QueryJobsRequest(spec=running), metadata=port.as_user("alice")).records == []
    assert jobs.QueryJobs(svc.QueryJobsRequest(), metadata=port.as_user("bob")).records == []


def test_replace_diff_says_what_an_update_would_touch_and_sends_nothing(port) -> None:
    service(port)
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    bigger = spec(SPEC.replace("instanceCount: 2", "instanceCount: 3").replace("cpuLimit: 0.5", "cpuLimit: 1"))
    diff = jobs.GetReplaceJobDiff(svc.GetReplaceJobDiffRequest(job_id=S1, spec=bigger), metadata=port.as_user("alice"))

    def spans(ranges) -> list[tuple[int, int]]:
        return [(getattr(r, "from"), r.to) for r in ranges]
    assert (spans(diff.instances_added), spans(diff.instances_updated)) == ([(2, 3)], [(0, 2)])
    assert spans(diff.instances_removed) == spans(diff.instances_unchanged) == []
    smaller = spec(SPEC.replace("instanceCount: 2", "instanceCount: 1"))
    diff = jobs.GetReplaceJobDiff(svc.GetReplaceJobDiffRequest(job_id=S1, spec=smaller),
                                  metadata=port.as_user("alice"))
    assert (spans(diff.instances_removed), spans(diff.instances_unchanged)) == ([(1, 2)], [(0, 1)])
    stale = svc.GetReplaceJobDiffRequest(job_id=S1, spec=smaller, version=peloton_pb2.EntityVersion(value="3-0-0"))
    assert refused(jobs.GetReplaceJobDiff, stale, port.as_user("alice")).code() == grpc.StatusCode.ABORTED
    assert commands(port) == []


def test_methods_with_no_meaning_here_say_why(port) -> None:
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    for call, request in ((jobs.RefreshJob, svc.RefreshJobRequest(job_id=J1)),
                          (jobs.GetJobCache, svc.GetJobCacheRequest(job_id=J1))):
        answer = refused(call, request, port.as_user("alice"))
        assert answer.code() == grpc.StatusCode.UNIMPLEMENTED and "cache" in answer.details()


def test_a_stored_spec_s_v0_enum_words_read_as_v1alpha_s(port) -> None:
    service(port, text=SPEC + "  constraint:\n    type: LABEL_CONSTRAINT\n    labelConstraint: {kind: HOST, "
                              "condition: CONDITION_EQUAL, label: {key: zone, value: z1}, requirement: 1}\n")
    jobs = stateless_svc_pb2_grpc.JobServiceStub(port.channel)
    got = jobs.GetJob(svc.GetJobRequest(job_id=S1), metadata=port.as_user("alice")).job_info.spec.default_spec
    assert json_format.MessageToDict(got.constraint) == {
        "type": "CONSTRAINT_TYPE_LABEL", "labelConstraint": {
            "kind": "LABEL_CONSTRAINT_KIND_HOST", "condition": "LABEL_CONSTRAINT_CONDITION_EQUAL",
            "label": {"key": "zone", "value": "z1"}, "requirement": 1}}
    assert got.containers[0].entrypoint.value == "sleep"
