"""Peloton's v1alpha stateless JobService, its writes: jobs created from a JobSpec, replaced,
patched, restarted, started, stopped and deleted, and the workflow in progress paused, resumed
or aborted, through the HTTP API's own routes. Errors are gRPC statuses, as v1alpha's are; a
write that names the entity version it read is ABORTED when the job has moved on since
(v1_shapes.entity_version). Its reads are v1_stateless_reads.py."""

from __future__ import annotations

from typing import Any

import grpc
import yaml
from google.protobuf import json_format

from peloton.api.v1alpha.job.stateless import stateless_pb2
from peloton.api.v1alpha.job.stateless.svc import stateless_svc_pb2 as svc
from peloton.model.stateless import is_stateless
from peloton.model.states import JOB_TERMINAL
from peloton.store.base import JobRow
from pelotonctl import admin
from pelotonctl.api.refusals import Refused
from pelotonctl.api.routes import jobs, updates
from pelotonctl.api.rpc import convert
from pelotonctl.api.rpc import v1_stateless_reads as _reads  # noqa: F401  (registers the service's reads)
from pelotonctl.api.rpc.calls import Call, Failed
from pelotonctl.api.rpc.catalog import served
from pelotonctl.api.rpc.v0_shapes import ranges_text
from pelotonctl.api.rpc.v1_shapes import add_ranges, check_version, entity_version, job_id_of
from stages.admit.commands import replace_diff, update_problems
from stages.admit.workflow import ACTIVE, UpdateOptions

SERVICE = "peloton.api.v1alpha.job.stateless.svc.JobService"
# JobSpec fields no job file holds: the pool goes apart, the revision is the server's to set.
APART = ("respoolId", "revision")


def spec_text(spec: stateless_pb2.JobSpec) -> str:
    return convert.as_yaml(spec, drop=APART)


def _no_secrets(secrets: Any) -> None:
    if len(secrets):
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, "secrets: not supported here (there is no secret store "
                                                       "to mount them from); give a task what it needs by its "
                                                       "environment or its image")


def _versioned(call: Call, job_id: str, version: str) -> JobRow | None:
    """The job, read as the caller may read it, when a version is given to check against it (the
    route checks the permission to act; reading the version is a read of the job)."""
    if not version.strip():
        return None
    job = call.door.readable_job(job_id, call.creds)
    check_version(call.store, job, version)
    return job


def _version_now(call: Call, job_id: str) -> str:
    job = call.store.get_job(job_id)
    return entity_version(call.store, job) if job is not None else ""


@served(f"{SERVICE}/CreateJob")
def create_job(call: Call, request: svc.CreateJobRequest) -> svc.CreateJobResponse:
    """Submit the spec to its pool (respool_id: a pool path) and wait until the job manager has
    stored or refused it; the job's id is the request's, when it gives one."""
    _no_secrets(request.secrets)
    if request.create_spec.ListFields():
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, "create_spec: a job's instances are all created at once "
                                                       "here (no batched creation); leave it unset")
    if not request.spec.respool_id.value.strip():
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, "spec.respool_id: the pool to run the job in (its path, "
                                                       "e.g. /a) is required")
    pool = convert.pool_path(request.spec.respool_id.value)
    wanted = request.job_id.value.strip() or None
    try:
        answer = jobs.create_job(jobs.JobCreate(pool=pool, config=spec_text(request.spec), job_id=wanted),
                                 call.creds, call.door, wait=True)
    except Refused as exc:
        if exc.status == 400 and pool not in call.store.list_pools():
            raise Failed(grpc.StatusCode.NOT_FOUND, exc.reason) from None
        raise
    response = svc.CreateJobResponse()
    response.job_id.value = answer["job_id"]
    # Not stored yet (the job manager is behind): a new job starts at config version 1, no workflow.
    response.version.value = _version_now(call, answer["job_id"]) or "1-0-0"
    return response


def update_options(spec: stateless_pb2.UpdateSpec) -> UpdateOptions:
    if spec.start_pods:
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, "update_spec.start_pods: not supported here: a stopped pod "
                                                       "stays stopped through an update and runs the new spec once "
                                                       "started (StartJob, StartPod)")
    return UpdateOptions(batch_size=spec.batch_size, max_instance_retries=spec.max_instance_retries,
                         max_failure_instances=spec.max_tolerable_instance_failures,
                         rollback_on_failure=spec.rollback_on_failure, start_paused=spec.start_paused,
                         in_place=spec.in_place)


def _same_pool(job: JobRow | None, pool_id: str) -> None:
    if job is not None and pool_id.strip() and convert.pool_path(pool_id) != job.pool:
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, f"spec.respool_id: a job does not move between pools "
                                                       f"({job.pool} -> {convert.pool_path(pool_id)})")


def _update(call: Call, job_id: str, job: JobRow | None, text: str, request: Any, response: Any) -> Any:
    """An UPDATE to `text`, rolled out as the request's update_spec says; answers the version the
    job is at once the job manager has taken it."""
    if job is None and request.spec.respool_id.value.strip():
        job = call.door.readable_job(job_id, call.creds)  # which pool it is in is a read of it
    _same_pool(job, request.spec.respool_id.value)
    jobs.control(call.door, "UPDATE", job_id, call.creds, None, update_options(request.update_spec), text,
                 wait=True)
    response.version.value = _version_now(call, job_id)
    return response


@served(f"{SERVICE}/ReplaceJob")
def replace_job(call: Call, request: svc.ReplaceJobRequest) -> svc.ReplaceJobResponse:
    """The whole spec as the job's next config version (fields left out are left out of it)."""
    _no_secrets(request.secrets)
    job_id = job_id_of(request.job_id)
    job = _versioned(call, job_id, request.version.value)
    return _update(call, job_id, job, spec_text(request.spec), request, svc.ReplaceJobResponse())


@served(f"{SERVICE}/PatchJob")
def patch_job(call: Call, request: svc.PatchJobRequest) -> svc.PatchJobResponse:
    """The fields the patch sets merged onto the stored config, as its next version: a message
    merges field by field, a list is replaced whole but a pod's containers, merged one by one (a
    pod runs one container here), and instance_spec by instance. As proto3 does not tell a field
    set to 0, false or "" from one left out, a patch cannot clear a field: ReplaceJob can."""
    _no_secrets(request.secrets)
    job_id = job_id_of(request.job_id)
    job = call.door.readable_job(job_id, call.creds)  # the stored spec it merges onto is read
    check_version(call.store, job, request.version.value)
    return _update(call, job_id, job, merged_text(job, request.spec), request, svc.PatchJobResponse())


def merged_text(job: JobRow, patch: stateless_pb2.JobSpec) -> str:
    try:
        doc = yaml.safe_load(job.config_text)
    except yaml.YAMLError:
        doc = None
    if not isinstance(doc, dict):
        raise Failed(grpc.StatusCode.FAILED_PRECONDITION, f"job {job.job_id}'s stored config is not a mapping to "
                                                          "merge a patch onto: ReplaceJob with the whole spec")
    change = json_format.MessageToDict(patch)
    for key in APART:
        change.pop(key, None)
    pods = {"defaultSpec", "instanceSpec"} & change.keys()
    if pods and not is_stateless({convert.fold(k): v for k, v in doc.items()}):
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, f"job {job.job_id}'s config is a v0 job config "
                                                       "(defaultConfig): pod specs cannot be merged into it; "
                                                       "ReplaceJob with the whole spec")
    merged = _merge(doc, change)
    # The changelog version a v0 file carries was checked when it was stored; the entity version
    # checks this write.
    for key in [k for k in merged if convert.fold(k) == "changelog"]:
        del merged[key]
    return yaml.safe_dump(merged, sort_keys=False)



def _merge(base: dict, change: dict) -> dict:
    out = dict(base)
    spelled = {convert.fold(k): k for k in base}  # a stored file's keys in any case: the patch's land on them
    for key, value in change.items():
        have = spelled.get(convert.fold(key), key)
        old = out.get(have)
        if isinstance(value, dict) and isinstance(old, dict):
            out[have] = _merge(old, value)
        elif convert.fold(key) == "containers" and isinstance(old, list) and isinstance(value, list):
            out[have] = [_merge(o, v) if isinstance(o, dict) and isinstance(v, dict) else v
                         for o, v in zip(old, value, strict=False)] + value[len(old):] + old[len(value):]
        else:
            out[have] = value
    return out


@served(f"{SERVICE}/RestartJob")
def restart_job(call: Call, request: svc.RestartJobRequest) -> svc.RestartJobResponse:
    """Replace the runs of the ranges given (every pod by default), batch_size at a time."""
    job_id = job_id_of(request.job_id)
    _versioned(call, job_id, request.version.value)
    spec = request.restart_spec
    jobs.control(call.door, "RESTART", job_id, call.creds, ranges_text(spec.ranges),
                 UpdateOptions(batch_size=spec.batch_size, in_place=spec.in_place), wait=True)
    response = svc.RestartJobResponse()
    response.version.value = _version_now(call, job_id)
    return response


def _steer(action: str, response_type: Any) -> Any:
    verb = action.lower()

    def run(call: Call, request: Any) -> Any:
        job_id = job_id_of(request.job_id)
        job = call.door.readable_job(job_id, call.creds)  # its workflow is read off it
        check_version(call.store, job, request.version.value)
        rollout = job.rollout or {}
        if not rollout.get("update_id") or rollout.get("state") not in ACTIVE:
            raise Failed(grpc.StatusCode.FAILED_PRECONDITION, f"job {job_id} has no workflow in progress to "
                                                              f"{verb} (ListJobWorkflows lists its workflows)")
        try:
            updates.steer_update(rollout["update_id"], verb, call.creds, call.door, wait=True)
        except admin.UserError as exc:
            if isinstance(exc, admin.NotFound):
                raise
            raise Failed(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None  # its state does not allow it
        response = response_type()
        response.version.value = _version_now(call, job_id)
        return response
    return run


served(f"{SERVICE}/PauseJobWorkflow", what="Pauses the job's update or restart in progress (entity version "
                                            "checked)")(_steer("PAUSE", svc.PauseJobWorkflowResponse))
served(f"{SERVICE}/ResumeJobWorkflow", what="Resumes the job's paused workflow (entity version checked)")(
    _steer("RESUME", svc.ResumeJobWorkflowResponse))
served(f"{SERVICE}/AbortJobWorkflow", what="Ends the job's workflow where it is (entity version checked)")(
    _steer("ABORT", svc.AbortJobWorkflowResponse))


def _whole_job(kind: str, response_type: Any) -> Any:
    def run(call: Call, request: Any) -> Any:
        job_id = job_id_of(request.job_id)
        _versioned(call, job_id, request.version.value)
        jobs.control(call.door, kind, job_id, call.creds, None, UpdateOptions(), wait=True)
        response = response_type()
        response.version.value = _version_now(call, job_id)
        return response
    return run


served(f"{SERVICE}/StartJob", what="Runs every stopped pod of the job again (entity version checked)")(
    _whole_job("START", svc.StartJobResponse))
served(f"{SERVICE}/StopJob", what="Stops every pod of the job (entity version checked)")(
    _whole_job("STOP", svc.StopJobResponse))


@served(f"{SERVICE}/DeleteJob")
def delete_job(call: Call, request: svc.DeleteJobRequest) -> svc.DeleteJobResponse:
    """Delete a job that has ended, with its pods, their events and their persistent volumes. A job
    still running is not deleted, force or not (FAILED_PRECONDITION): stop it, then delete it once
    it is KILLED."""
    job_id = job_id_of(request.job_id)
    _versioned(call, job_id, request.version.value)
    try:
        jobs.delete(call.door, job_id, call.creds, wait=True)
    except admin.UserError as exc:
        job = None if isinstance(exc, admin.NotFound) else call.store.get_job(job_id)
        if job is None or job.state in JOB_TERMINAL:
            raise
        why = str(exc) + ("; force does not stop a job here: StopJob, then DeleteJob once it is KILLED"
                          if request.force else "")
        raise Failed(grpc.StatusCode.FAILED_PRECONDITION, why) from None
    return svc.DeleteJobResponse()


@served(f"{SERVICE}/GetReplaceJobDiff")
def replace_job_diff(call: Call, request: svc.GetReplaceJobDiffRequest) -> svc.GetReplaceJobDiffResponse:
    """Which pods ReplaceJob with this spec would add, remove, replace and leave, checked as the
    job manager checks an update; nothing is sent."""
    job_id = job_id_of(request.job_id)
    job = call.door.readable_job(job_id, call.creds)
    check_version(call.store, job, request.version.value)
    _same_pool(job, request.spec.respool_id.value)
    new = admin.validate_job(spec_text(request.spec), call.settings)
    old = admin.validate_job(job.config_text, call.settings)
    problems = update_problems(old, new, job.pool, job.config_version, None)
    if problems:
        raise admin.UserError("update refused:\n" + "\n".join(f"  {p}" for p in problems))
    response = svc.GetReplaceJobDiffResponse()
    for field, instances in replace_diff(old, new).items():
        add_ranges(getattr(response, field), instances)
    return response
