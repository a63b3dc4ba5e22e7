"""Peloton's v1alpha AdminService: Lockdown and RemoveLockdown of Read, Write and Kill, through the
HTTP API's lockdown routes (administrators); GoalStateEngine and Launch answer a failure with
why, as Peloton answers a component it cannot lock."""

from __future__ import annotations

from peloton.api.v1alpha.admin.svc import admin_svc_pb2 as svc
from pelotonctl.api.routes import operations
from pelotonctl.api.rpc.calls import Call
from pelotonctl.api.rpc.catalog import served

SERVICE = "peloton.api.v1alpha.admin.svc.AdminService"


def _set(call: Call, components: list[int], locked: bool, response):
    names = [svc.Component.Name(c) for c in components]
    answer = operations.set_locks(operations.Components(components=names), call.creds, call.door, locked)
    response.successes.extend(svc.Component.Value(n) for n in answer["successes"])
    for failure in answer["failures"]:
        response.failures.add(component=svc.Component.Value(failure["component"]),
                              FailureMessage=failure["message"])
    return response


@served(f"{SERVICE}/Lockdown")
def lockdown(call: Call, request: svc.LockdownRequest) -> svc.LockdownResponse:
    """Locks components down: their API calls and job commands are refused until removed."""
    return _set(call, list(request.components), True, svc.LockdownResponse())


@served(f"{SERVICE}/RemoveLockdown")
def remove_lockdown(call: Call, request: svc.RemoveLockdownRequest) -> svc.RemoveLockdownResponse:
    """Lifts the lockdown of components."""
    return _set(call, list(request.components), False, svc.RemoveLockdownResponse())
