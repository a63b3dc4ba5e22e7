"""The resource manager's view: the task runs it tracks and the gangs waiting in its pools'
queues, each limited to the pools the caller may read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.security import HTTPAuthorizationCredentials

from peloton.auth.permissions import decide
from pelotonctl import queries
from pelotonctl.api.door import Door, DoorDep
from pelotonctl.api.identity import Creds
from pelotonctl.api.storeguard import answering

router = APIRouter(tags=["resmgr"], dependencies=[Depends(answering)])


def readable_scope(door: Door, creds: HTTPAuthorizationCredentials | None, job_id: str | None,
                   pool: str | None) -> Callable[[str], bool]:
    """Who asks, and which pools they may read: a job or a pool named must be theirs (403),
    and of the rest, what they may not read is skipped."""
    who = door.who(creds, "job.read", job_id or pool or "resmgr")
    pools = door.store.list_pools()
    if job_id:
        door.allow(who, "job.read", job_id, door.job(job_id).pool)
    elif pool and pool.rstrip("/") in pools:
        door.allow(who, "job.read", pool.rstrip("/"), pool.rstrip("/"))
    return lambda path: decide(who, "job.read", path, pools, door.admin_groups).allowed


@router.get("/v1/resmgr/tasks",
            summary="The task runs the resource manager tracks (queued in a pool, or admitted) with the job "
                    "manager's state of each: Peloton's resmgr active tasks")
def resmgr_tasks(creds: Creds, door: DoorDep, job: str | None = None,
                 pool: Annotated[str | None, Query(description="A pool path: it and the pools below it")] = None,
                 state: Annotated[list[str], Query(description="Task states; any")] = []) -> dict:
    readable = readable_scope(door, creds, job, pool)
    states = queries.task_states(queries.words(state))
    return {"tasks": queries.resmgr_tasks(door.store, job, pool, states, readable)}


@router.get("/v1/resmgr/pending",
            summary="The gangs waiting in the pools' queues, in admission order: Peloton's resmgr pending tasks")
def resmgr_pending(creds: Creds, door: DoorDep,
                   pool: Annotated[str | None, Query(description="A pool path: it and the pools below it "
                                                                  "(default: every pool)")] = None,
                   limit: Annotated[int, Query(ge=1, le=100_000, description="Gangs a pool")] = 100) -> dict:
    readable = readable_scope(door, creds, None, pool)
    return {"gangs": queries.pending_gangs(door.store, pool, limit, readable)}
