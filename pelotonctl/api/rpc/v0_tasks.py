"""Peloton's v0 TaskManager (peloton.api.v0.task): a job's tasks read, listed and queried, and
instances stopped, started and restarted by half-open ranges, through the HTTP API's routes. As
Peloton's job manager does, a job not found or an instance out of range is answered in the
response's fields."""

from __future__ import annotations

from typing import Any

from peloton.api.v0.task import task_pb2
from pelotonctl import admin, queries
from pelotonctl.api.refusals import Refused
from pelotonctl.api.routes import jobs, tasks
from pelotonctl.api.rpc.calls import Call
from pelotonctl.api.rpc.catalog import not_served, served
from pelotonctl.api.rpc.v0_shapes import job_id, pod_event, ranges_text, task_info
from stages.admit.workflow import UpdateOptions

SERVICE = "peloton.api.v0.task.TaskManager"

not_served(f"{SERVICE}/BrowseSandbox", "there is no Mesos sandbox to browse: a run's stdout and stderr come from the "
                                       "agent of its host through the API, GET /v1/jobs/{id}/tasks/{instance}/logs "
                                       "(`pelotonctl task logs JOB INSTANCE`)")
not_served(f"{SERVICE}/DeletePodEvents", "a task's events are its job's history and go with the job (Delete, or "
                                         "PELOTON_JOB_RETENTION_S after it ends), never apart from it")


def _readable(call: Call, request: Any, response: Any) -> Any:
    """The job the request names, once the caller may read it; None with notFound set if there is
    none (a refusal of any other kind is a status)."""
    try:
        return call.door.readable_job(job_id(request.jobId), call.creds)
    except Refused as exc:
        if exc.status != 404:
            raise
        missing = response.error.notFound if "error" in response.DESCRIPTOR.fields_by_name else response.notFound
        missing.id.CopyFrom(request.jobId)
        missing.message = exc.reason
        return None


def _out_of_range(response: Any, job: Any) -> Any:
    where = response.error.outOfRange if "error" in response.DESCRIPTOR.fields_by_name else response.outOfRange
    where.jobId.value, where.instanceCount = job.job_id, job.instance_count
    return response


@served(f"{SERVICE}/Get")
def get(call: Call, request: task_pb2.GetRequest) -> task_pb2.GetResponse:
    """An instance's current run, in result and in results (an earlier run is not kept apart from its
    events: GetPodEvents has them)."""
    response = task_pb2.GetResponse()
    job = _readable(call, request, response)
    if job is None:
        return response
    if request.instanceId >= job.instance_count:
        return _out_of_range(response, job)
    task = tasks.task_of(call.door, job.job_id, request.instanceId)
    task_info(job, task, response.result)
    response.results.add().CopyFrom(response.result)
    return response


@served(f"{SERVICE}/List")
def list_tasks(call: Call, request: task_pb2.ListRequest) -> task_pb2.ListResponse:
    """The job's instances in the range (half-open; every one when none), by instance id."""
    response = task_pb2.ListResponse()
    job = _readable(call, request, response)
    if job is None:
        return response
    first, stop = 0, job.instance_count
    if request.HasField("range"):
        first, stop = getattr(request.range, "from"), min(request.range.to or job.instance_count, stop)
    for task in call.store.tasks_of_job(job.job_id):
        if first <= task.instance < stop:
            task_info(job, task, response.result.value[task.instance])
    return response


@served(f"{SERVICE}/Query")
def query(call: Call, request: task_pb2.QueryRequest) -> task_pb2.QueryResponse:
    """The job's tasks by state, name and host, sorted and paged as the HTTP task query does."""
    response = task_pb2.QueryResponse()
    job = _readable(call, request, response)
    if job is None:
        return response
    spec, page = request.spec, request.spec.pagination
    order = page.orderBy[0] if page.orderBy else None
    query = queries.TaskQuery(tuple(task_pb2.TaskState.Name(s) for s in spec.taskStates), tuple(spec.names),
                              tuple(spec.hosts), (order.property.value,) if order and order.property.value else (),
                              order is not None and order.order == 2, page.offset, page.limit or None)
    rows, matched = queries.query_tasks(call.store, job, query)
    by_instance = {t.instance: t for t in call.store.tasks_of_job(job.job_id)}
    for row in rows:
        task_info(job, by_instance[row["instance"]], response.records.add())
    response.pagination.offset, response.pagination.limit = page.offset, page.limit
    response.pagination.total = matched
    return response


def _instances(kind: str) -> Any:
    def run(call: Call, request: Any) -> Any:
        response = getattr(task_pb2, f"{kind.title()}Response")()
        job = _readable(call, request, response)
        if job is None:
            return response
        beyond = [r for r in request.ranges if r.to > job.instance_count or getattr(r, "from") >= r.to]
        if beyond:
            return _out_of_range(response, job)
        answer = jobs.control(call.door, kind, job.job_id, call.creds, ranges_text(request.ranges),
                              UpdateOptions(), wait=True)
        done = {"STOP": "stoppedInstanceIds", "START": "startedInstanceIds"}.get(kind)
        if done:
            getattr(response, done).extend(answer.get("instances", []))
        return response
    return run


served(f"{SERVICE}/Start", what="Runs again the stopped instances in the ranges")(_instances("START"))
served(f"{SERVICE}/Stop", what="Stops the instances in the ranges (half-open; every one when none)")(
    _instances("STOP"))
served(f"{SERVICE}/Restart", what="New runs for the instances in the ranges, all at once")(_instances("RESTART"))


@served(f"{SERVICE}/GetPodEvents")
def pod_events(call: Call, request: task_pb2.GetPodEventsRequest) -> task_pb2.GetPodEventsResponse:
    """An instance's state changes, newest first (of one run when runId is given), at most limit."""
    response = task_pb2.GetPodEventsResponse()
    try:
        job = call.door.readable_job(job_id(request.jobId), call.creds)
    except Refused as exc:
        if exc.status != 404:
            raise
        response.error.message = exc.reason
        return response
    run = _run_of(request.runId)
    events = [e for e in call.store.task_events(job.job_id) if e["instance"] == request.instanceId
              and (run is None or e["run_id"] == run)]
    events.sort(key=lambda e: e.get("timestamp_ms") or 0, reverse=True)
    for event in events[:request.limit or None]:
        pod_event(event, job, response.result.add())
    return response


def _run_of(run_id: str) -> int | None:
    """A run id as Peloton writes it ("<job>-<instance>-<run>") or a bare run number."""
    tail = run_id.rsplit("-", 1)[-1] if run_id else ""
    if not tail:
        return None
    if not tail.isdigit():
        raise admin.UserError(f"runId {run_id!r}: a run is <job id>-<instance>-<run number>")
    return int(tail)
