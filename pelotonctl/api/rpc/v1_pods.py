"""Peloton's v1alpha PodService: a pod is an instance of a job, named <job id>-<instance>; it is
started, stopped and restarted by the HTTP API's job commands on that one instance, and read with
its earlier runs and its events from the job's history. Errors are gRPC statuses."""

from __future__ import annotations

import grpc

from peloton.api.v1alpha.pod import pod_pb2
from peloton.api.v1alpha.pod.svc import pod_svc_pb2 as svc
from peloton.model.states import JOB_TERMINAL
from pelotonctl import admin
from pelotonctl.api.routes import jobs, tasks
from pelotonctl.api.rpc.calls import Call, Failed
from pelotonctl.api.rpc.catalog import not_served, served
from pelotonctl.api.rpc.v1_shapes import (
    earlier_runs,
    entity_version,
    job_spec,
    parse_pod_id,
    parse_pod_name,
    pod_event,
    pod_spec,
    pod_status,
    run_starts,
)
from stages.admit.drain import down, is_down
from stages.admit.workflow import UpdateOptions

SERVICE = "peloton.api.v1alpha.pod.svc.PodService"

not_served(f"{SERVICE}/BrowsePodSandbox",
           "there is no Mesos agent sandbox to browse here; a run's stdout and stderr come from the host that ran "
           "it through the HTTP API's GET /v1/jobs/{id}/tasks/{instance}/logs (?run=N&file=stdout|stderr), or "
           "`pelotonctl task logs`")
not_served(f"{SERVICE}/DeletePodEvents",
           "a pod's events are its job's history and are kept as long as the job: they go with it, when it is "
           "deleted (DeleteJob) or when the job manager deletes it PELOTON_JOB_RETENTION_S after it ended, and are "
           "not deleted a run at a time")


def _command(call: Call, kind: str, name: str) -> None:
    """A job command of `kind` on the pod's instance alone, once the job manager took it."""
    job_id, instance = parse_pod_name(name)
    try:
        jobs.control(call.door, kind, job_id, call.creds, str(instance), UpdateOptions(), wait=True)
    except admin.UserError as exc:
        job = None if isinstance(exc, admin.NotFound) else call.store.get_job(job_id)
        if job is not None and instance >= job.instance_count:
            raise admin.NotFound(f"no pod {name}: job {job_id} has pods {job_id}-0 to "
                                 f"{job_id}-{job.instance_count - 1}") from None
        if job is not None and kind == "STOP" and job.state in JOB_TERMINAL:
            return  # stopped already, with its job: nothing to do, as Peloton's StopPod says
        raise


@served(f"{SERVICE}/StartPod")
def start_pod(call: Call, request: svc.StartPodRequest) -> svc.StartPodResponse:
    """Run a stopped pod again (a pod running already is left as it is)."""
    _command(call, "START", request.pod_name.value)
    return svc.StartPodResponse()


@served(f"{SERVICE}/StopPod")
def stop_pod(call: Call, request: svc.StopPodRequest) -> svc.StopPodResponse:
    """Stop the pod's run (one stopped already is left as it is)."""
    _command(call, "STOP", request.pod_name.value)
    return svc.StopPodResponse()


@served(f"{SERVICE}/RestartPod")
def restart_pod(call: Call, request: svc.RestartPodRequest) -> svc.RestartPodResponse:
    """Replace the pod's run by a new one. With check_sla, ABORTED where that would take more pods
    of the job down than its sla.maximumUnavailableInstances allows (without it, the restart waits
    for room, as every workflow here does)."""
    if request.check_sla:
        job_id, instance = parse_pod_name(request.pod_name.value)
        job = call.door.readable_job(job_id, call.creds)  # its SLA and pods are read
        budget = admin.validate_job(job.config_text, call.settings).max_unavailable_instances
        runs = call.store.tasks_of_job(job_id)
        task = next((t for t in runs if t.instance == instance), None)
        if budget and task is not None and not is_down(task) and down(runs) + 1 > budget:
            raise Failed(grpc.StatusCode.ABORTED, f"restarting pod {request.pod_name.value} would leave "
                                                  f"{down(runs) + 1} pods of job {job_id} down, above its "
                                                  f"sla.maximumUnavailableInstances {budget}")
    _command(call, "RESTART", request.pod_name.value)
    return svc.RestartPodResponse()


@served(f"{SERVICE}/GetPod")
def get_pod(call: Call, request: svc.GetPodRequest) -> svc.GetPodResponse:
    """The pod's current run (with its spec unless status_only) and its earlier runs, newest
    first, as their last events left them; limit: the runs answered, the current one counted (0:
    all). An earlier run's spec is not given: only the job's current config is at hand per pod."""
    job_id, instance = parse_pod_name(request.pod_name.value)
    job = call.door.readable_job(job_id, call.creds)
    task = tasks.task_of(call.door, job_id, instance)
    events = [e for e in call.store.task_events(job_id) if e["instance"] == instance]
    response = svc.GetPodResponse()
    pod_status(job, task, response.current.status, entity_version(call.store, job),
               run_starts(events).get((instance, task.run_id)))
    if not request.status_only:
        pod_spec(job_spec(job), job_id, instance, response.current.spec)
    if request.limit != 1:
        earlier = earlier_runs(job, task, events)[:request.limit - 1 if request.limit else None]
        response.previous.extend(pod_pb2.PodInfo(status=s) for s in earlier)
    return response


@served(f"{SERVICE}/GetPodEvents")
def pod_events(call: Call, request: svc.GetPodEventsRequest) -> svc.GetPodEventsResponse:
    """The state changes of one run of the pod (pod_id; its current run by default), in order."""
    job_id, instance = parse_pod_name(request.pod_name.value)
    job = call.door.readable_job(job_id, call.creds)
    task = tasks.task_of(call.door, job_id, instance)
    run = parse_pod_id(request.pod_id.value, job_id, instance) if request.pod_id.value.strip() else task.run_id
    if run > task.run_id or run < 1:
        raise admin.NotFound(f"pod {request.pod_name.value} has no run {run} (its runs are 1 to {task.run_id})")
    version = entity_version(call.store, job)
    response = svc.GetPodEventsResponse()
    for event in call.store.task_events(job_id):
        if event["instance"] == instance and event["run_id"] == run:
            pod_event(job, event, response.events.add(), version)
    return response
