"""Hosts for v0's and v1alpha's HostService alike (their HostInfo and requests are the same
fields; v0's HostInfo adds the host's pools): the host-state view's records as HostInfo,
maintenance by hostname, and host pools, through the HTTP API's host routes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from peloton.model.host_pools import DEFAULT_POOL, POOL_LABEL
from pelotonctl import admin
from pelotonctl.api.routes import hosts
from pelotonctl.api.rpc.calls import Call, Failed, status_of
from pelotonctl.api.rpc.catalog import served

PREFIX = "HOST_STATE_"
MOVE_HOSTS = ("MoveHosts moves a number of hosts out of Peloton's 'shared' pool picked by its resource manager's "
              "host scorer, which does not exist here: move each host with ChangeHostPool (it drains first)")


def query(call: Call, states: Iterable[int], info: Any) -> list[Any]:
    """The hosts in any of `states` (Peloton's HostState numbers; none: every host) as `info`
    messages. Peloton answers nothing for a state no host is ever in (INVALID, UNKNOWN, a number
    it does not know), so those are let through and match no host."""
    enum = info.DESCRIPTOR.fields_by_name["state"].enum_type
    asked = {enum.values_by_number[s].name.removeprefix(PREFIX) if s in enum.values_by_number else str(s)
             for s in states}
    known = sorted(asked & {"UP", "DRAINING", "DRAINED", "DOWN"})
    rows = hosts.list_hosts(call.creds, call.door, state=known)["hosts"]
    found = [host_info(row, info(), enum) for row in rows if not asked or row["state"] in asked]
    if found and "desired_pool" in info.DESCRIPTOR.fields_by_name:
        moving = {h: d for h, (p, d) in call.door.store.host_pool_members().items() if p != d}
        for out in found:
            out.desired_pool = moving.get(out.hostname, out.current_pool)
    return found


def host_info(row: dict, out: Any, enum: Any) -> Any:
    """A host's row (admin.host_row) as HostInfo: its hostname is its host id, its labels its
    agent's (hostname among them). No address is kept (ip is left empty). The goal is DOWN for a
    host in maintenance, UP for one that is UP or whose agent went silent (DOWN, not reachable)."""
    out.hostname = row["host_id"]
    out.state = enum.values_by_name[PREFIX + row["state"]].number
    silent = row["state"] == "DOWN" and not row["runs_known"]
    goal = "UP" if row["state"] == "UP" or silent else "DOWN"
    out.goal_state = enum.values_by_name[PREFIX + goal].number
    for key, value in sorted((row.get("labels") or {}).items()):
        out.labels.add(key=key, value=str(value))
    if "current_pool" in out.DESCRIPTOR.fields_by_name:
        out.current_pool = (row.get("labels") or {}).get(POOL_LABEL, DEFAULT_POOL)
    return out


def serve_host_pools(service: str, svc: Any) -> None:
    """Peloton's four host-pool methods on `service` (v0's and v1alpha's HostService have the same
    messages, in `svc`), through the HTTP API's host-pool routes."""

    @served(f"{service}/ListHostPools")
    def list_host_pools(call: Call, request: Any) -> Any:
        """Every host pool and its hosts (the default pool always among them)."""
        response = svc.ListHostPoolsResponse()
        for pool in hosts.list_host_pools(call.creds, call.door)["pools"]:
            response.pools.add(name=pool["name"], hosts=pool["hosts"])
        return response

    @served(f"{service}/CreateHostPool")
    def create_host_pool(call: Call, request: Any) -> Any:
        """Makes an empty host pool (administrators); a taken name is ALREADY_EXISTS."""
        hosts.create_host_pool(hosts.HostPoolName(name=request.name), call.creds, call.door)
        return svc.CreateHostPoolResponse()

    @served(f"{service}/DeleteHostPool")
    def delete_host_pool(call: Call, request: Any) -> Any:
        """Deletes a host pool; its hosts move to the default pool (administrators)."""
        hosts.delete_host_pool(request.name, call.creds, call.door)
        return svc.DeleteHostPoolResponse()

    @served(f"{service}/ChangeHostPool")
    def change_host_pool(call: Call, request: Any) -> Any:
        """Moves a host to another pool, after draining its runs when it has any (administrators);
        an empty sourcePool means whichever it is in."""
        if not request.hostname or not request.destinationPool:
            raise admin.UserError("hostname and destinationPool: give the host and the pool it moves to")
        hosts.change_host_pool(request.hostname, hosts.HostPoolMove(pool=request.destinationPool,
                                                                    source=request.sourcePool), call.creds, call.door)
        return svc.ChangeHostPoolResponse()


def maintain(call: Call, request: Any, action: str) -> str:
    """Start or complete maintenance of request.hostname, or of each of the deprecated hostnames
    (all tried, as Peloton does, the failures named together); the hostname answered, as Peloton
    answers it (empty for a list). There is no force here: a drain the host manager would refuse
    (the last UP host, too many hosts at once) is FAILED_PRECONDITION."""
    names = list(request.hostnames) or [request.hostname.strip()]
    if not all(names):
        raise admin.UserError("hostname: give the host to put into maintenance or bring back up")
    failed: list[tuple[grpc.StatusCode, str]] = []
    done = []
    for name in names:
        try:
            hosts.maintenance(name, action, call.creds, call.door)
            done.append(name)
        except Exception as exc:  # each host is tried; each failure is answered as its own status
            code, detail = _status(exc, call)
            failed.append((code, f"{name}: {detail}" if request.hostnames else detail))
    if failed:
        also = f" ({', '.join(done)} done)" if done else ""
        raise Failed(failed[0][0], "; ".join(detail for _code, detail in failed) + also)
    return "" if request.hostnames else names[0]


def _status(exc: Exception, call: Call) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, admin.UserError) and not isinstance(exc, admin.NotFound):
        return grpc.StatusCode.FAILED_PRECONDITION, (
            f"{exc} (over gRPC there is no force: `pelotonctl host maintenance start --force`, or the HTTP API "
            f"with force: true, drains it anyway)")
    return status_of(exc, call.settings)
