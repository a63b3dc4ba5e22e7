"""Hosts: every host's state and room, and the admins' maintenance (drain a host, bring it back).
The list is the host-state view's: with the store away it still answers, without why runs wait on
a draining host (the store's), and says so (X-Peloton-Served-From: views)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from pelotonctl import admin, host_pools, queries
from pelotonctl.api.door import DoorDep, Refused
from pelotonctl.api.identity import Creds
from pelotonctl.api.storeguard import StoreAway, answering, current_answer

router = APIRouter(tags=["hosts"], dependencies=[Depends(answering)])


class Maintenance(BaseModel):
    force: bool = Field(False, description="start: drain even the last UP host, or past PELOTON_MAX_DRAIN_SHARE")


@router.get("/v1/hosts", summary="Every host: state, free and total room, runs, labels, and why runs wait on a "
                                 "draining host")
def list_hosts(creds: Creds, door: DoorDep, state: Annotated[list[str], Query(
        description="Host states (UP, DRAINING, DRAINED, DOWN, or Peloton's HOST_STATE_UP...); any")] = []) -> dict:
    door.allow(door.who(creds, "host.read", "hosts"), "host.read", "hosts")
    states = queries.host_states(queries.words(state))
    rows = [admin.host_row(h) for h in sorted(door.hosts(), key=lambda r: r["host_id"])
            if not states or h["state"] in states]
    try:
        return {"hosts": admin.with_drain_waits(door.settings, door.store, rows)}
    except StoreAway as away:
        current_answer().served_from_views(away.line)
        return {"hosts": [{**r, "waiting": []} for r in rows]}


@router.post("/v1/hosts/{host_id}/maintenance/{action}",
             summary="Drain a host (start) or bring it back (complete) (admins)")
def maintenance(host_id: str, action: str, creds: Creds, door: DoorDep, body: Maintenance = Maintenance()) -> dict:
    who = door.who(creds, "host.maintenance", host_id)
    door.allow(who, "host.maintenance", host_id)
    if action not in ("start", "complete"):
        raise Refused(404, f"no maintenance action {action!r}: start or complete")
    admin.request_maintenance(door.settings, host_id, action.upper(), who=who.user, force=body.force)
    return {"host_id": host_id, "maintenance": action}


class HostPoolName(BaseModel):
    name: str = Field(..., description="The host pool's name: letters, digits, '_', '.' or '-'")


class HostPoolMove(BaseModel):
    pool: str = Field(..., description="The host pool the host moves to")
    source: str = Field("", description="The pool the host is in, as the caller saw it: refused if it is in another")


@router.get("/v1/host-pools", summary="Every host pool with its hosts, and the hosts on their way into it")
def list_host_pools(creds: Creds, door: DoorDep) -> dict:
    door.allow(door.who(creds, "host.read", "host-pools"), "host.read", "host-pools")
    return {"pools": host_pools.host_pool_rows(door.store, door.hosts())}


@router.post("/v1/host-pools", status_code=201, summary="Make a host pool (admins)")
def create_host_pool(body: HostPoolName, creds: Creds, door: DoorDep) -> dict:
    who = door.who(creds, "host.pool", body.name)
    door.allow(who, "host.pool", body.name)
    return host_pools.create_host_pool(door.settings, door.store, body.name, who.user)


@router.delete("/v1/host-pools/{name}", summary="Delete a host pool; its hosts move to the default pool (admins)")
def delete_host_pool(name: str, creds: Creds, door: DoorDep) -> dict:
    who = door.who(creds, "host.pool", name)
    door.allow(who, "host.pool", name)
    return {"name": name, "deleted": True, "moved_to_default": host_pools.delete_host_pool(
        door.settings, door.store, name, who.user)}


@router.post("/v1/hosts/{host_id}/pool", summary="Move a host to another host pool, after draining its runs "
                                                 "(admins)")
def change_host_pool(host_id: str, body: HostPoolMove, creds: Creds, door: DoorDep) -> dict:
    who = door.who(creds, "host.pool", host_id)
    door.allow(who, "host.pool", host_id)
    return host_pools.change_host_pool(door.settings, door.store, host_id, body.pool, body.source, who.user)
