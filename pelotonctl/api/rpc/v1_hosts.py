"""Peloton's v1alpha HostService (peloton.api.v1alpha.host.svc): v0's, in v1alpha's messages
(host_shapes.py), host pools included; its errors were gRPC statuses in v0 already."""

from __future__ import annotations

from peloton.api.v1alpha.host import host_pb2
from peloton.api.v1alpha.host.svc import host_svc_pb2 as svc
from pelotonctl.api.rpc import host_shapes
from pelotonctl.api.rpc.calls import Call
from pelotonctl.api.rpc.catalog import served

SERVICE = "peloton.api.v1alpha.host.svc.HostService"


@served(f"{SERVICE}/QueryHosts")
def query_hosts(call: Call, request: svc.QueryHostsRequest) -> svc.QueryHostsResponse:
    """The hosts in the states asked (every host when none): state, goal state, labels."""
    return svc.QueryHostsResponse(host_infos=host_shapes.query(call, request.host_states, host_pb2.HostInfo))


@served(f"{SERVICE}/StartMaintenance")
def start_maintenance(call: Call, request: svc.StartMaintenanceRequest) -> svc.StartMaintenanceResponse:
    """Drains a host: no new placements, its runs moved off, then DOWN (administrators)."""
    return svc.StartMaintenanceResponse(hostname=host_shapes.maintain(call, request, "start"))


@served(f"{SERVICE}/CompleteMaintenance")
def complete_maintenance(call: Call, request: svc.CompleteMaintenanceRequest) -> svc.CompleteMaintenanceResponse:
    """Brings a host out of maintenance: UP again."""
    return svc.CompleteMaintenanceResponse(hostname=host_shapes.maintain(call, request, "complete"))


@served(f"{SERVICE}/ListHostPools")
def list_host_pools(call: Call, request: svc.ListHostPoolsRequest) -> svc.ListHostPoolsResponse:
    """Every host pool and its hosts (the default pool always among them)."""
    return host_shapes.list_pools(call, svc.ListHostPoolsResponse())


@served(f"{SERVICE}/CreateHostPool")
def create_host_pool(call: Call, request: svc.CreateHostPoolRequest) -> svc.CreateHostPoolResponse:
    """Makes an empty host pool (administrators); a taken name is ALREADY_EXISTS."""
    host_shapes.create_pool(call, request)
    return svc.CreateHostPoolResponse()


@served(f"{SERVICE}/DeleteHostPool")
def delete_host_pool(call: Call, request: svc.DeleteHostPoolRequest) -> svc.DeleteHostPoolResponse:
    """Deletes a host pool; its hosts move to the default pool (administrators)."""
    host_shapes.delete_pool(call, request)
    return svc.DeleteHostPoolResponse()


@served(f"{SERVICE}/ChangeHostPool")
def change_host_pool(call: Call, request: svc.ChangeHostPoolRequest) -> svc.ChangeHostPoolResponse:
    """Moves a host to another pool, after draining its runs when it has any (administrators)."""
    host_shapes.change_pool(call, request)
    return svc.ChangeHostPoolResponse()
