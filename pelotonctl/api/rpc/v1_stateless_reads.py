"""Peloton's v1alpha stateless JobService, its reads: a job (or one of its config versions), its
pods listed and queried, jobs queried and listed, a job's workflows and their events. What the
caller may not read is refused (a named job) or left out (a listing), as the HTTP API does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from peloton.api.v1alpha.job.stateless import stateless_pb2
from peloton.api.v1alpha.job.stateless.svc import stateless_svc_pb2 as svc
from peloton.api.v1alpha.pod import pod_pb2
from peloton.api.v1alpha.query import query_pb2
from pelotonctl import admin, queries
from pelotonctl.api.routes import jobs
from pelotonctl.api.rpc import convert
from pelotonctl.api.rpc.calls import Call, Failed
from pelotonctl.api.rpc.catalog import served
from pelotonctl.api.rpc.v1_shapes import (
    config_version,
    current_workflow,
    entity_version,
    instance_workflow_events,
    job_id_of,
    job_info,
    job_spec,
    job_summary,
    ordinal,
    parse_pod_name,
    pod_spec,
    pod_status,
    pod_summary,
    run_starts,
    workflow_info,
)

SERVICE = "peloton.api.v1alpha.job.stateless.svc.JobService"
# Jobs or pods in one response of a stream; and jobs read from the store at a time for one.
CHUNK = 200
PAGE = 1000


@served(f"{SERVICE}/GetJob")
def get_job(call: Call, request: svc.GetJobRequest) -> svc.GetJobResponse:
    """The job's spec and status (or its summary), with its workflow in progress or last; of a
    version given, that version's spec alone."""
    job_id = job_id_of(request.job_id)
    job = call.door.readable_job(job_id, call.creds)
    response = svc.GetJobResponse()
    wanted = config_version(request.version.value)
    if wanted is not None:
        text = job.config_text if wanted == job.config_version else call.store.job_config(job_id, wanted)
        if text is None:
            raise admin.NotFound(f"job {job_id} has no config version {wanted} (its current one is "
                                 f"{job.config_version})")
        response.job_info.job_id.value = job_id
        job_spec(job, text, response.job_info.spec)
        response.job_info.spec.revision.version = wanted
        return response
    workflows = call.store.updates_of_job(job_id)
    if request.summary_only:
        job_summary(call.store, job, response.summary, workflows=workflows)
    else:
        job_info(call.store, job, response.job_info, workflows=workflows)
    wf = current_workflow(job, workflows)
    if wf is not None:
        workflow_info(wf, ordinal(wf, workflows), response.workflow_info)
    return response


def _all_jobs(call: Call, name: str | None, order: str) -> Iterator[list[dict]]:
    """Pages of the jobs the caller may read (of a name, when given), through the route's query."""
    offset = 0
    while True:
        page = jobs.query_jobs(call.creds, call.door, state=[], pool=None, owner=None, name=name, label=[],
                               keyword=[], created_since_ms=None, sort=["creation_time"], order=order, total=None,
                               limit=PAGE, offset=offset)
        yield page["jobs"]
        if page["next_offset"] is None:
            return
        offset = page["next_offset"]


@served(f"{SERVICE}/GetJobIDFromJobName")
def job_ids_by_name(call: Call, request: svc.GetJobIDFromJobNameRequest) -> svc.GetJobIDFromJobNameResponse:
    """The jobs of that name the caller may read, the newest first."""
    name = request.job_name.strip()
    if not name:
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, "job_name: a job name is required")
    response = svc.GetJobIDFromJobNameResponse()
    for page in _all_jobs(call, name, "DESC"):
        for job in page:
            response.job_id.add().value = job["job_id"]
    if not response.job_id:
        raise admin.NotFound(f"no job named {name!r} that you may read")
    return response


@served(f"{SERVICE}/GetWorkflowEvents")
def workflow_events(call: Call, request: svc.GetWorkflowEventsRequest) -> svc.GetWorkflowEventsResponse:
    """Where the job's workflow in progress (or its last) is with one instance, newest first."""
    job_id = job_id_of(request.job_id)
    job = call.door.readable_job(job_id, call.creds)
    wf = current_workflow(job, call.store.updates_of_job(job_id))
    events = instance_workflow_events(wf, request.instance_id) if wf is not None else []
    return svc.GetWorkflowEventsResponse(events=events[:request.limit or None])


@served(f"{SERVICE}/ListJobWorkflows")
def job_workflows(call: Call, request: svc.ListJobWorkflowsRequest) -> svc.ListJobWorkflowsResponse:
    """The job's updates and restarts, newest first (updates_limit of them, when given)."""
    job_id = job_id_of(request.job_id)
    call.door.readable_job(job_id, call.creds)
    workflows = call.store.updates_of_job(job_id)
    response = svc.ListJobWorkflowsResponse()
    for wf in workflows[:request.updates_limit or None]:
        workflow_info(wf, ordinal(wf, workflows), response.workflow_infos.add(), request.instance_events,
                      request.instance_events_limit)
    return response


@served(f"{SERVICE}/ListPods", streams=True)
def list_pods(call: Call, request: svc.ListPodsRequest) -> Iterator[svc.ListPodsResponse]:
    """The job's pods (of [from, to) when given; to 0: to the last), CHUNK a response."""
    job_id = job_id_of(request.job_id)
    job = call.door.readable_job(job_id, call.creds)
    first = getattr(request.range, "from")
    stop = request.range.to or None
    tasks = [t for t in call.store.tasks_of_job(job_id) if t.instance >= first and (stop is None or t.instance < stop)]
    version = entity_version(call.store, job)
    starts = run_starts(call.store.task_events(job_id)) if tasks else {}
    for at in range(0, len(tasks), CHUNK):
        if not call.active():
            return
        response = svc.ListPodsResponse()
        for task in tasks[at:at + CHUNK]:
            pod_summary(job, task, response.pods.add(), version, starts.get((task.instance, task.run_id)))
        yield response


@served(f"{SERVICE}/QueryPods")
def query_pods(call: Call, request: svc.QueryPodsRequest) -> svc.QueryPodsResponse:
    """The job's pods by state, name (a pod name, or its task config's name) and host, sorted and
    paged (limit 0: every one); specs too unless summary_only."""
    job_id = job_id_of(request.job_id)
    job = call.door.readable_job(job_id, call.creds)
    spec = request.spec
    page = request.pagination if request.HasField("pagination") else spec.pagination
    states = queries.task_states(pod_pb2.PodState.Name(s) for s in spec.pod_states)
    if "LOST" in states:
        states.append("DROPPED")  # a placement refused by a host manager reads as lost (v1_shapes.pod_state)
    order = page.order_by[0] if page.order_by else None
    query = queries.TaskQuery(
        tuple(states), (), tuple(spec.hosts), tuple(o.property.value for o in page.order_by if o.property.value),
        bool(order and order.order == query_pb2.OrderBy.Order.Value("ORDER_BY_DESC")), 0, None)
    rows, _ = queries.query_tasks(call.store, job, query)
    if spec.names:
        instances: set[int] = set()
        names: set[str] = set()
        for n in spec.names:
            try:
                owner, instance = parse_pod_name(n.value)
            except Failed:
                owner, instance = "", -1
            if owner == job_id:
                instances.add(instance)
            else:
                names.add(n.value)
        rows = [r for r in rows if r["instance"] in instances or r["name"] in names]
    total = len(rows)
    if page.max_limit:
        rows = rows[:page.max_limit]
    rows = rows[page.offset:page.offset + page.limit] if page.limit else rows[page.offset:]
    by_instance = {t.instance: t for t in call.store.tasks_of_job(job_id)}
    version = entity_version(call.store, job)
    starts = run_starts(call.store.task_events(job_id)) if rows else {}
    whole = None if request.summary_only else job_spec(job)
    response = svc.QueryPodsResponse()
    for row in rows:
        task = by_instance.get(row["instance"])
        if task is None:  # gone since the query read it
            continue
        info = response.pods.add()
        pod_status(job, task, info.status, version, starts.get((task.instance, task.run_id)))
        if whole is not None:
            pod_spec(whole, job_id, task.instance, info.spec)
    response.pagination.offset, response.pagination.limit = page.offset, page.limit
    response.pagination.total = total
    return response


@served(f"{SERVICE}/QueryJobs")
def query_jobs(call: Call, request: svc.QueryJobsRequest) -> svc.QueryJobsResponse:
    """Jobs the caller may read that match the spec, a page at a time (limit 100 unless given)."""
    spec, page = request.spec, request.spec.pagination
    created = spec.creation_time_range
    since = created.min.ToMilliseconds() if spec.HasField("creation_time_range") and created.HasField("min") else None
    order = page.order_by[0] if page.order_by else None
    limit = min(page.limit or 100, 1000)
    found = jobs.query_jobs(
        call.creds, call.door, state=[stateless_pb2.JobState.Name(s) for s in spec.job_states],
        pool=spec.respool.value or None, owner=spec.owner or None, name=spec.name or None,
        label=[f"{lb.key}={lb.value}" for lb in spec.labels], keyword=list(spec.keywords), created_since_ms=since,
        sort=[o.property.value for o in page.order_by if o.property.value] or ["creation_time"],
        order="ASC" if order and order.order == query_pb2.OrderBy.Order.Value("ORDER_BY_ASC") else "DESC",
        total=page.max_limit or None, limit=limit, offset=page.offset)
    ids = [j["job_id"] for j in found["jobs"]]
    rows = call.store.get_jobs(ids)
    counts = call.store.task_state_counts(ids) if ids else {}
    response = svc.QueryJobsResponse()
    for row in (rows[i] for i in ids if i in rows):
        if _within(row, spec):
            job_summary(call.store, row, response.records.add(), counts.get(row.job_id, {}))
    response.pagination.offset, response.pagination.limit = page.offset, limit
    response.pagination.total = page.offset + len(ids) + (1 if found["next_offset"] else 0)
    response.spec.CopyFrom(spec)
    return response


def _within(job: Any, spec: stateless_pb2.QuerySpec) -> bool:
    return convert.within(job, spec.creation_time_range if spec.HasField("creation_time_range") else None,
                          spec.completion_time_range if spec.HasField("completion_time_range") else None)


@served(f"{SERVICE}/ListJobs", streams=True)
def list_jobs(call: Call, _request: svc.ListJobsRequest) -> Iterator[svc.ListJobsResponse]:
    """Every job the caller may read, the oldest first (a job created meanwhile comes at the end,
    none twice), CHUNK summaries a response, each sent as it is made."""
    for page in _all_jobs(call, None, "ASC"):
        ids = [j["job_id"] for j in page]
        for at in range(0, len(ids), CHUNK):
            if not call.active():
                return
            chunk = ids[at:at + CHUNK]
            rows, counts = call.store.get_jobs(chunk), call.store.task_state_counts(chunk)
            response = svc.ListJobsResponse()
            for row in (rows[i] for i in chunk if i in rows):  # deleted since the page was read: left out
                job_summary(call.store, row, response.jobs.add(), counts.get(row.job_id, {}))
            yield response
