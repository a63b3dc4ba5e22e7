"""Persistent volumes: a job's, one by its id, and deleting one. Reading a volume is reading its
job (job.read on the job's pool), deleting one is deleting from its job (job.delete); the volumes
of a job that is gone (kept when it was deleted) are for administrators only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from peloton.auth.permissions import decide
from peloton.auth.tokens import Principal
from peloton.store.base import JobRow
from pelotonctl import volumes
from pelotonctl.api.door import Door, DoorDep, Refused
from pelotonctl.api.identity import Creds
from pelotonctl.api.storeguard import answering

router = APIRouter(tags=["volumes"], dependencies=[Depends(answering)])


@router.get("/v1/volumes", summary="A job's persistent volumes by instance (DELETED ones too), or every volume the "
                                   "caller may read")
def list_volumes(creds: Creds, door: DoorDep, job: Annotated[str | None, Query(
        description="The job whose volumes (Peloton's `volume list JOB`); none: every volume of a job the caller "
                    "may read")] = None) -> dict:
    who = door.who(creds, "job.read", job or "volumes")
    if job is None:  # as a job query: what the caller may not read is skipped, not refused
        rows, readable = volumes.list_volumes(door.store), {}
        for job_id in sorted({v["job_id"] for v in rows}):
            known = door.store.get_job(job_id)
            readable[job_id] = door.may(who, "job.read", known.pool) if known else _admin(door, who)
        return {"volumes": [v for v in rows if readable[v["job_id"]]]}
    rows = volumes.list_volumes(door.store, job)
    if door.store.get_job(job) is None and not rows:
        raise Refused(404, f"no job {job}")
    allow_volume(door, who, "job.read", job, job)
    return {"volumes": rows}


@router.get("/v1/volumes/{volume_id}", summary="A persistent volume: its job and instance, host, path in the "
                                               "sandbox, size and state")
def get_volume(volume_id: str, creds: Creds, door: DoorDep) -> dict:
    who = door.who(creds, "job.read", volume_id)
    volume = volumes.get_volume(door.store, volume_id)
    allow_volume(door, who, "job.read", volume_id, volume["job_id"])
    return volume


@router.delete("/v1/volumes/{volume_id}", summary="Delete a persistent volume of a job that has ended (or is "
                                                  "gone): its directory is removed from its host")
def delete_volume(volume_id: str, creds: Creds, door: DoorDep) -> dict:
    who = door.who(creds, "job.delete", volume_id)
    volume = volumes.get_volume(door.store, volume_id)
    allow_volume(door, who, "job.delete", volume_id, volume["job_id"])
    return door.send(volumes.delete_volume, door.settings, door.store, volume_id, who.user)


def allow_volume(door: Door, who: Principal, action: str, obj: str, job_id: str) -> JobRow | None:
    """The volume's job once the caller may act so on its pool (403 otherwise), audited as every
    decision is; None when the job is gone, which only administrators act on."""
    job = door.store.get_job(job_id)
    if job is not None:
        door.allow(who, action, obj, job.pool)
        return job
    allowed = _admin(door, who)
    reason = (decide(who, action, None, {}, door.admin_groups).reason if allowed else
              f"job {job_id} is gone: only administrators act on the volumes of a deleted job")
    door.audit.record(who, action, obj, None, allowed, reason)
    if not allowed:
        raise Refused(403, f"{action} on {obj} refused: {reason}")
    return None


def _admin(door: Door, who: Principal) -> bool:
    return who.admin or bool(who.groups & door.admin_groups)
