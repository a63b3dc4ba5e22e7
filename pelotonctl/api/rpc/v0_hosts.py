"""Peloton's v0 HostService (peloton.api.v0.host.svc): hosts queried by state from the API's
host-state view, maintenance started and completed by hostname, and host pools, through the HTTP
API's host routes (host_shapes.py)."""

from __future__ import annotations

from peloton.api.v0.host import host_pb2
from peloton.api.v0.host.svc import host_svc_pb2 as svc
from pelotonctl.api.rpc import host_shapes
from pelotonctl.api.rpc.calls import Call
from pelotonctl.api.rpc.catalog import not_served, served

SERVICE = "peloton.api.v0.host.svc.HostService"


@served(f"{SERVICE}/QueryHosts")
def query_hosts(call: Call, request: svc.QueryHostsRequest) -> svc.QueryHostsResponse:
    """The hosts in any of the states asked (every host if none), each with its host pool and the
    one it is moving to (the same when it is not moving)."""
    return svc.QueryHostsResponse(host_infos=host_shapes.query(call, request.host_states, host_pb2.HostInfo))


@served(f"{SERVICE}/StartMaintenance")
def start_maintenance(call: Call, request: svc.StartMaintenanceRequest) -> svc.StartMaintenanceResponse:
    """Drain the host: it takes no new run, its runs move as their jobs' disruption budgets allow,
    then it is DRAINED and DOWN (administrators only)."""
    return svc.StartMaintenanceResponse(hostname=host_shapes.maintain(call, request, "start"))


@served(f"{SERVICE}/CompleteMaintenance")
def complete_maintenance(call: Call, request: svc.CompleteMaintenanceRequest) -> svc.CompleteMaintenanceResponse:
    """Brings hosts out of maintenance: UP again, placements welcome."""
    return svc.CompleteMaintenanceResponse(hostname=host_shapes.maintain(call, request, "complete"))


not_served(f"{SERVICE}/MoveHosts", host_shapes.MOVE_HOSTS)

host_shapes.serve_host_pools(SERVICE, svc)
