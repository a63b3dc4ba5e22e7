"""Persistent volumes as users see them (Peloton's `volume list|delete`): each stateful instance's,
in the store as its host manager recorded it when made. A delete marks the volume DELETED in the
store and asks the host manager of its host (VolumeDelete on the placements topic, keyed by the
host) to have the host's agent remove its directory. A volume is not deleted while its job may run
its instance again on it: only once the job has ended, or is gone. A job's deletion deletes its
volumes (delete_job_volumes) unless asked to keep them."""

from __future__ import annotations

import os
import uuid

from peloton.config import Settings
from peloton.model.states import JOB_TERMINAL
from peloton.runtime import Emitter, now_ms
from peloton.store import QueryStore
from pelotonctl import admin
from pelotonctl.admin import NotFound, UserError


def list_volumes(store: QueryStore, job_id: str | None = None) -> list[dict]:
    """Every volume (a job's, by instance, when job_id is given), DELETED ones included."""
    return store.list_volumes(job_id)


def get_volume(store: QueryStore, volume_id: str) -> dict:
    found = store.get_volume(volume_id)
    if found is None:
        raise NotFound(f"no volume {volume_id!r}: a volume's id is <job id>-<instance> "
                       "(`pelotonctl volume list JOB` lists a job's)")
    return found


def delete_problem(volume: dict, job_state: str | None) -> str | None:
    """Why a volume cannot be deleted now, or None: its job (None: gone) has not ended, so its
    instance may run, or run again, on it."""
    if job_state is None or job_state in JOB_TERMINAL:
        return None
    job_id = volume["job_id"]
    return (f"volume {volume['volume_id']} is instance {volume['instance']}'s of job {job_id}, which is "
            f"{job_state}: the instance may run, or run again, on it. Stop the job (`pelotonctl job stop {job_id}`) "
            f"and delete the volume once the job has ended, or delete the job (its volumes go with it)")


def delete_volume(settings: Settings, store: QueryStore, volume_id: str, who: str = "",
                  out: Emitter | None = None) -> dict:
    """Delete a volume: the volume as it is now, with `already_deleted` (a volume DELETED before
    is answered as it is, nothing sent). Refused (UserError) while its job has not ended."""
    volume = get_volume(store, volume_id)
    if volume["state"] == "DELETED":
        return {**volume, "already_deleted": True}
    job = store.get_job(volume["job_id"])
    problem = delete_problem(volume, job.state if job else None)
    if problem:
        raise UserError(problem)
    _send_deletes(settings, store, [volume], who, out)
    return {**get_volume(store, volume_id), "already_deleted": False}


def delete_job_volumes(settings: Settings, store: QueryStore, job_id: str, who: str = "",
                       out: Emitter | None = None) -> list[str]:
    """Delete every CREATED volume of a job that has ended or is gone (a job's deletion does);
    refused (UserError) while it has not ended. Returns the ids of the volumes deleted."""
    volumes = [v for v in store.list_volumes(job_id) if v["state"] == "CREATED"]
    if not volumes:
        return []
    job = store.get_job(job_id)
    problem = delete_problem(volumes[0], job.state if job else None)
    if problem:
        raise UserError(problem)
    _send_deletes(settings, store, volumes, who, out)
    return [v["volume_id"] for v in volumes]


def job_deleted_volumes(settings: Settings, store: QueryStore, job_id: str, keep: bool, who: str = "",
                        out: Emitter | None = None) -> dict[str, list[str]]:
    """What a job's deletion does with its volumes: deleted, or kept (`--keep-volumes`)."""
    if keep:
        return {"volumes_deleted": [], "volumes_kept": [v["volume_id"] for v in store.list_volumes(job_id)
                                                         if v["state"] == "CREATED"]}
    return {"volumes_deleted": delete_job_volumes(settings, store, job_id, who, out), "volumes_kept": []}


def _send_deletes(settings: Settings, store: QueryStore, volumes: list[dict], who: str, out: Emitter | None) -> None:
    """Each volume's VolumeDelete to its host's host manager, delivered before the store says
    DELETED: a delete that cannot be sent leaves the volume CREATED, to be deleted again."""
    out = out or admin.emitter(settings)
    user = who or os.environ.get("USER", "")
    for volume in volumes:
        if volume["host_id"]:  # a volume is recorded once made on its host; an empty one has no directory
            out.emit("placements", volume["host_id"], "peloton.VolumeDelete", {
                "request_id": uuid.uuid4().hex, "volume_id": volume["volume_id"], "host_id": volume["host_id"],
                "requested_by": user, "sent_ms": now_ms()})
    admin.deliver(out, settings)
    at = now_ms()
    for volume in volumes:
        store.set_volume_state(volume["volume_id"], "DELETED", at)
