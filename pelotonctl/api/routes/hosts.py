"""Hosts: every host's state and room, and the admins' maintenance (drain a host, bring it back).
The list is the host-state view's: with the store away it still answers, without why runs wait on
a draining host (the store's), and says so (X-Peloton-Served-From: views)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from pelotonctl import admin, queries
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
