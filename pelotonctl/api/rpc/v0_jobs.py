"""Peloton's v0 JobManager (peloton.api.v0.job): jobs created from a JobConfig, read, queried,
updated, stopped, started, restarted and deleted through the HTTP API's own routes. As Peloton's
job manager does, an error the response has a field for (a job not found, a config refused) is
answered in that field; any other is a gRPC status."""

from __future__ import annotations

from typing import Any

import grpc

from peloton.api.v0.job import job_pb2
from peloton.model.states import JOB_TERMINAL
from pelotonctl import admin
from pelotonctl.api.refusals import Refused
from pelotonctl.api.routes import jobs
from pelotonctl.api.rpc import convert
from pelotonctl.api.rpc.calls import Call, Failed
from pelotonctl.api.rpc.catalog import served
from pelotonctl.api.rpc.v0_shapes import job_id, job_info, job_summary, ranges_text
from stages.admit.workflow import UpdateOptions

SERVICE = "peloton.api.v0.job.JobManager"
# Fields of JobConfig passed on apart from the YAML (the pool), or that no job file holds.
APART = ("respoolID", "changeLog")


@served(f"{SERVICE}/Create")
def create(call: Call, request: job_pb2.CreateRequest) -> job_pb2.CreateResponse:
    """Submit the config to its pool (respoolID: a pool path, or "root") and wait until the job
    manager has stored it or refused it."""
    response = job_pb2.CreateResponse()
    wanted = job_id(request.id) or None
    text = convert.as_yaml(request.config, drop=APART)
    pool = convert.pool_path(request.config.respoolID.value)
    try:
        answer = jobs.create_job(jobs.JobCreate(pool=pool, config=text, job_id=wanted), call.creds, call.door,
                                 wait=True)
    except admin.AlreadyExists as exc:
        response.error.alreadyExists.id.value, response.error.alreadyExists.message = wanted or "", str(exc)
        return response
    except (admin.UserError, Refused) as exc:
        if isinstance(exc, Refused) and exc.status != 400:
            raise
        if wanted and "job id" in str(exc):
            response.error.invalidJobId.id.value, response.error.invalidJobId.message = wanted, str(exc)
        else:
            response.error.invalidConfig.id.value = wanted or ""
            response.error.invalidConfig.message = str(exc)
        return response
    response.jobId.value = answer["job_id"]
    return response


@served(f"{SERVICE}/Get")
def get(call: Call, request: job_pb2.GetRequest) -> job_pb2.GetResponse:
    """The job's config as submitted and its runtime: state, task counts, the update in progress."""
    response = job_pb2.GetResponse()
    try:
        job = call.door.readable_job(job_id(request.id), call.creds)
    except Refused as exc:
        if exc.status != 404:
            raise
        response.error.notFound.id.CopyFrom(request.id)
        response.error.notFound.message = exc.reason
        return response
    job_info(call.store, job, response.jobInfo)
    return response


@served(f"{SERVICE}/Query")
def query(call: Call, request: job_pb2.QueryRequest) -> job_pb2.QueryResponse:
    """Jobs the caller may read that match the spec, a page at a time; records (config and runtime)
    unless summaryOnly, and summaries always."""
    spec, page = request.spec, request.spec.pagination
    pool = spec.respool.value or (convert.pool_path(request.respoolID.value) if request.respoolID.value else None)
    created_since = spec.creationTimeRange.min.ToMilliseconds() if spec.HasField("creationTimeRange") else None
    order = page.orderBy[0] if page.orderBy else None
    limit = page.limit or 100
    response = job_pb2.QueryResponse()
    try:
        found = jobs.query_jobs(
            call.creds, call.door, state=[job_pb2.JobState.Name(s) for s in spec.jobStates], pool=pool,
            owner=spec.owner or None, name=spec.name or None, label=[f"{lb.key}={lb.value}" for lb in spec.labels],
            keyword=list(spec.keywords), created_since_ms=created_since,
            sort=[order.property.value] if order and order.property.value else ["creation_time"],
            order="ASC" if order and order.order == 1 else "DESC", total=page.maxLimit or None,
            limit=min(limit, 1000), offset=page.offset)
    except admin.UserError as exc:
        response.error.err.message = str(exc)
        return response
    rows = call.store.get_jobs([j["job_id"] for j in found["jobs"]])
    for row in (rows[j["job_id"]] for j in found["jobs"] if j["job_id"] in rows):
        if not _within(row, spec):
            continue
        job_summary(call.store, row, response.results.add())
        if not request.summaryOnly:
            job_info(call.store, row, response.records.add())
    response.pagination.offset, response.pagination.limit = page.offset, limit
    response.pagination.total = page.offset + len(response.results) + (1 if found["next_offset"] else 0)
    response.spec.CopyFrom(spec)
    return response


def _within(job: Any, spec: job_pb2.QuerySpec) -> bool:
    return convert.within(job, spec.creationTimeRange if spec.HasField("creationTimeRange") else None,
                          spec.completionTimeRange if spec.HasField("completionTimeRange") else None)


@served(f"{SERVICE}/Delete")
def delete(call: Call, request: job_pb2.DeleteRequest) -> job_pb2.DeleteResponse:
    """Delete a job that has ended, with its persistent volumes, waiting for the job manager's answer."""
    response = job_pb2.DeleteResponse()
    try:
        jobs.delete(call.door, job_id(request.id), call.creds, wait=True)
    except (admin.NotFound, Refused) as exc:
        if isinstance(exc, Refused) and exc.status != 404:
            raise
        response.error.notFound.id.CopyFrom(request.id)
        response.error.notFound.message = str(exc)
    return response


@served(f"{SERVICE}/Update")
def update(call: Call, request: job_pb2.UpdateRequest) -> job_pb2.UpdateResponse:
    """A new config version for the job, rolled out as the HTTP API's update (all at once unless
    its updateConfig says a batch size)."""
    response = job_pb2.UpdateResponse()
    text = convert.as_yaml(request.config, drop=APART)
    try:
        answer = jobs.control(call.door, "UPDATE", job_id(request.id), call.creds, None, UpdateOptions(), text,
                              wait=True)
    except (admin.NotFound, admin.UserError, Refused) as exc:
        if isinstance(exc, Refused) and exc.status not in (400, 404):
            raise
        if isinstance(exc, admin.NotFound) or getattr(exc, "status", 0) == 404:
            response.error.jobNotFound.id.CopyFrom(request.id)
            response.error.jobNotFound.message = str(exc)
        else:
            response.error.invalidConfig.id.CopyFrom(request.id)
            response.error.invalidConfig.message = str(exc)
        return response
    response.id.CopyFrom(request.id)
    response.message = f"update {answer.get('update_id', answer['command_id'])} of instances " \
                       f"{_listed(answer.get('instances', []))}"
    return response


def _listed(instances: list[int]) -> str:
    return ",".join(map(str, instances)) or "none"


def _versioned(call: Call, job: str, version: int) -> None:
    """resourceVersion, where given, must be the job's configuration version (ABORTED if not)."""
    if version:
        current = call.door.job(job).config_version
        if current != version:
            raise Failed(grpc.StatusCode.ABORTED, f"job {job} is at configuration version {current}, not "
                                                  f"{version}: read it again and retry")


def _instances_command(kind: str) -> Any:
    def run(call: Call, request: Any) -> Any:
        job = job_id(request.id)
        _versioned(call, job, request.resourceVersion)
        answer = jobs.control(call.door, kind, job, call.creds, ranges_text(request.ranges),
                              UpdateOptions(batch_size=_batch(request)), wait=True)
        response = getattr(job_pb2, f"{kind.title()}Response")()
        response.resourceVersion = call.door.job(job).config_version
        if answer.get("update_id"):
            response.updateID.value = answer["update_id"]
        return response
    return run


def _batch(request: Any) -> int:
    for name in ("restartConfig", "startConfig", "stopConfig"):
        if name in request.DESCRIPTOR.fields_by_name and request.HasField(name):
            return int(getattr(getattr(request, name), "batchSize", 0))
    return 0


served(f"{SERVICE}/Restart", what="New runs for the instances in the ranges (every one when none), restartConfig's "
                                   "batchSize at a time; resourceVersion, where given, must be the job's "
                                   "configuration version")(_instances_command("RESTART"))
served(f"{SERVICE}/Start", what="Runs again the stopped instances in the ranges (every one when none)")(
    _instances_command("START"))
served(f"{SERVICE}/Stop", what="Stops the instances in the ranges, half-open (every one when none)")(
    _instances_command("STOP"))


@served(f"{SERVICE}/GetActiveJobs")
def active_jobs(call: Call, _request: job_pb2.GetActiveJobsRequest) -> job_pb2.GetActiveJobsResponse:
    """The jobs not ended that the caller may read."""
    who = call.door.who(call.creds, "job.read", "jobs")
    response = job_pb2.GetActiveJobsResponse()
    for job in call.store.active_jobs():
        if job.state not in JOB_TERMINAL and call.door.may(who, "job.read", job.pool):
            response.ids.add().value = job.job_id
    return response
