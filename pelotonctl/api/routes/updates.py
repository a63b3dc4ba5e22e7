"""Updates: every restart and update of a job is a workflow with an id, read here and steered
(pause, resume, abort, rollback) while in progress."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.security import HTTPAuthorizationCredentials

from peloton.auth.tokens import Principal
from pelotonctl import admin
from pelotonctl.api.door import Door, DoorDep, Refused, Wait
from pelotonctl.api.identity import Creds
from pelotonctl.shapes import update_info
from stages.admit.workflow import ACTIONS

router = APIRouter(tags=["updates"])


@router.get("/v1/jobs/{job_id}/updates", summary="A job's updates and restarts, newest first")
def list_updates(job_id: str, creds: Creds, door: DoorDep) -> dict:
    door.readable_job(job_id, creds)
    return {"updates": [update_info(u) for u in door.store.updates_of_job(job_id)]}


def update_of(door: Door, update_id: str, creds: HTTPAuthorizationCredentials | None,
              action: str) -> tuple[Principal, dict]:
    """Who asks and the update, once they may act so on its job's pool; 404 if there is none."""
    who = door.who(creds, action, update_id)
    wf = door.store.get_update(update_id)
    if wf is None:
        raise Refused(404, f"no update {update_id}")
    job = door.job(wf["job_id"])
    door.allow(who, action, update_id, job.pool)
    return who, wf


@router.get("/v1/updates/{update_id}",
            summary="An update's state, its instances done, failed and in flight, and why it is where it is")
def get_update(update_id: str, creds: Creds, door: DoorDep) -> dict:
    return update_info(update_of(door, update_id, creds, "job.read")[1])


@router.post("/v1/updates/{update_id}/{action}", summary="pause, resume, abort or rollback an update in progress")
def steer_update(update_id: str, action: str, creds: Creds, door: DoorDep, wait: Wait = False) -> dict:
    kind = action.upper()
    if kind not in ACTIONS:
        raise Refused(404, f"no action {action!r} on an update (pause, resume, abort, rollback)")
    who, _ = update_of(door, update_id, creds, f"update.{action.lower()}")
    answer = door.send(admin.steer_update, door.settings, door.store, update_id, kind, requested_by=who.user)
    if wait:
        door.settle(answer)
        answer["state"] = (door.store.get_update(update_id) or {}).get("state")
    return answer
