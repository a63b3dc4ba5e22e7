"""Peloton's v0 UpdateService (peloton.api.v0.update.svc): a job's config rolled out as an update
workflow, read, listed and steered (pause, resume, abort, rollback), through the HTTP API's
routes. Our workflow states are Peloton's update states by name."""

from __future__ import annotations

import grpc

from peloton.api.v0.update import update_pb2
from peloton.api.v0.update.svc import update_svc_pb2 as svc
from pelotonctl.api.routes import jobs, updates
from pelotonctl.api.rpc import convert
from pelotonctl.api.rpc.calls import Call, Failed
from pelotonctl.api.rpc.catalog import served
from pelotonctl.api.rpc.v0_jobs import APART
from pelotonctl.api.rpc.v0_shapes import job_id
from stages.admit.commands import UNSUPPORTED_UPDATE_FIELDS
from stages.admit.workflow import UpdateOptions

SERVICE = "peloton.api.v0.update.svc.UpdateService"


def update_info(wf: dict, info: update_pb2.UpdateInfo) -> update_pb2.UpdateInfo:
    info.updateId.value, info.jobId.value = wf["update_id"], wf["job_id"]
    info.configVersion, info.prevConfigVersion = int(wf.get("to_version") or 0), int(wf.get("from_version") or 0)
    options = wf.get("options") or {}
    info.config.batchSize = int(options.get("batch_size") or 0)
    info.config.startPaused = bool(options.get("start_paused"))
    info.config.rollbackOnFailure = bool(options.get("rollback_on_failure"))
    info.config.maxInstanceAttempts = int(options.get("max_instance_retries") or 0)
    info.config.maxFailureInstances = int(options.get("max_failure_instances") or 0)
    info.config.inPlace = bool(options.get("in_place"))
    status = info.status
    status.state = convert.enum_value(update_pb2.State, wf.get("state"), "INVALID")
    status.numTasksDone = len(wf.get("done") or [])
    status.numTasksFailed = len(wf.get("failed") or [])
    status.numTasksRemaining = len(wf.get("remaining") or []) + len(wf.get("in_flight") or [])
    return info


@served(f"{SERVICE}/CreateUpdate")
def create(call: Call, request: svc.CreateUpdateRequest) -> svc.CreateUpdateResponse:
    """The job's new config, rolled out as updateConfig says."""
    given = request.updateConfig
    for name, value in (("batchpercentage", given.batchPercentage), ("stopbeforeupdate", given.stopBeforeUpdate),
                        ("starttasks", given.startTasks)):
        if value:  # as a job file's updateConfig is refused (stages.admit.commands)
            raise Failed(grpc.StatusCode.INVALID_ARGUMENT, UNSUPPORTED_UPDATE_FIELDS[name])
    options = UpdateOptions(batch_size=given.batchSize, max_instance_retries=given.maxInstanceAttempts,
                            max_failure_instances=given.maxFailureInstances,
                            rollback_on_failure=given.rollbackOnFailure, start_paused=given.startPaused,
                            in_place=given.inPlace)
    answer = jobs.control(call.door, "UPDATE", job_id(request.jobId), call.creds, None, options,
                          convert.as_yaml(request.jobConfig, drop=APART), wait=True)
    response = svc.CreateUpdateResponse()
    response.updateID.value = answer.get("update_id") or answer["command_id"]
    return response


@served(f"{SERVICE}/GetUpdate")
def get(call: Call, request: svc.GetUpdateRequest) -> svc.GetUpdateResponse:
    """The update's config, state and counts of instances done, failed and remaining."""
    _who, wf = updates.update_of(call.door, request.updateId.value, call.creds, "job.read")
    response = svc.GetUpdateResponse()
    update_info(wf, response.updateInfo)
    if request.statusOnly:
        response.updateInfo.ClearField("config")
    return response


@served(f"{SERVICE}/ListUpdates")
def list_updates(call: Call, request: svc.ListUpdatesRequest) -> svc.ListUpdatesResponse:
    """The job's updates and restarts, newest first, at most limit."""
    found = updates.list_updates(job_id(request.jobID), call.creds, call.door)["updates"]
    response = svc.ListUpdatesResponse()
    for wf in found[:request.limit or None]:
        update_info(wf, response.updateInfo.add())
    return response


def _steer(action: str, response_type: type) -> object:
    def run(call: Call, request: object) -> object:
        updates.steer_update(request.updateId.value, action, call.creds, call.door, wait=True)  # type: ignore[attr-defined]
        return response_type()
    return run


served(f"{SERVICE}/PauseUpdate", what="Holds the update after the batch in flight")(
    _steer("pause", svc.PauseUpdateResponse))
served(f"{SERVICE}/ResumeUpdate", what="Goes on with a paused update")(_steer("resume", svc.ResumeUpdateResponse))
served(f"{SERVICE}/RollbackUpdate", what="Rolls the instances updated so far back to the previous config")(
    _steer("rollback", svc.RollbackUpdateResponse))


@served(f"{SERVICE}/AbortUpdate")
def abort(call: Call, request: svc.AbortUpdateRequest) -> svc.AbortUpdateResponse:
    """Ends the update where it is. softAbort (let the batch in flight finish) is the same here:
    the runs already replaced stay, none is started after."""
    updates.steer_update(request.updateId.value, "abort", call.creds, call.door, wait=True)
    return svc.AbortUpdateResponse()
