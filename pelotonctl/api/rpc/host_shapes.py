"""Hosts for v0's and v1alpha's HostService alike (their HostInfo and requests are the same
fields; v0's adds host pools, which do not exist here): the host-state view's records as
HostInfo, and maintenance by hostname, through the HTTP API's host routes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from pelotonctl import admin
from pelotonctl.api.routes import hosts
from pelotonctl.api.rpc.calls import Call, Failed, status_of

PREFIX = "HOST_STATE_"
HOST_POOLS = ("host pools do not exist here yet: every host serves every resource pool, and a job is kept to "
              "hosts by its placement constraints on host labels (a host's labels are in QueryHosts' HostInfo)")


def query(call: Call, states: Iterable[int], info: Any) -> list[Any]:
    """The hosts in any of `states` (Peloton's HostState numbers; none: every host) as `info`
    messages. Peloton answers nothing for a state no host is ever in (INVALID, UNKNOWN, a number
    it does not know), so those are let through and match no host."""
    enum = info.DESCRIPTOR.fields_by_name["state"].enum_type
    asked = {enum.values_by_number[s].name.removeprefix(PREFIX) if s in enum.values_by_number else str(s)
             for s in states}
    known = sorted(asked & {"UP", "DRAINING", "DRAINED", "DOWN"})
    rows = hosts.list_hosts(call.creds, call.door, state=known)["hosts"]
    return [host_info(row, info(), enum) for row in rows if not asked or row["state"] in asked]


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
    return out


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
