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


host_shapes.serve_host_pools(SERVICE, svc)
