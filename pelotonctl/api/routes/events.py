"""Task events as they happen: a job's, or those of every job in a pool that the caller may read,
as Server-Sent Events read from the broker, resumable with Last-Event-ID."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from peloton.auth.permissions import decide
from pelotonctl.api import stream
from pelotonctl.api.door import DoorDep, Refused
from pelotonctl.api.identity import Creds

router = APIRouter(tags=["tasks"])


def event_stream(request: Request, lines: Iterator[str]) -> StreamingResponse:
    """Lines of a task_events generator as SSE, read in a worker thread, until the client goes."""
    async def sse() -> AsyncIterator[str]:
        try:
            while True:
                chunk = await run_in_threadpool(next, lines, None)
                if chunk is None:
                    return
                if chunk:
                    yield chunk
                elif await request.is_disconnected():
                    return
        finally:
            with contextlib.suppress(ValueError):  # still running in its thread: it ends on its own
                lines.close()
    return StreamingResponse(sse(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/v1/jobs/{job_id}/events",
            summary="The job's task events as Server-Sent Events, from its creation on; resumable with Last-Event-ID")
def job_events(job_id: str, request: Request, creds: Creds, door: DoorDep,
               follow: Annotated[bool, Query(description="Go on as events come (false: stop at the end)")] = True,
               last_event_id: Annotated[str | None, Header()] = None) -> StreamingResponse:
    job = door.readable_job(job_id, creds)
    lines = stream.task_events(door.settings, lambda j: j == job_id, job_id=job_id,
                               since_ms=job.created_ms - 60_000, resume=stream.Position.parse(last_event_id),
                               follow=follow)
    return event_stream(request, lines)


@router.get("/v1/events",
            summary="Task events of every job in a pool (and the pools below it) that the caller may read, "
                    "as Server-Sent Events, from now (or since_ms) on; resumable with Last-Event-ID")
def pool_events(pool: str, request: Request, creds: Creds, door: DoorDep, since_ms: int | None = None,
                follow: bool = True, last_event_id: Annotated[str | None, Header()] = None) -> StreamingResponse:
    who = door.who(creds, "job.read", pool)
    pools = door.store.list_pools()
    if pool not in pools:
        raise Refused(404, f"no resource pool {pool}")
    door.allow(who, "job.read", pool, pool)
    pool_of: dict[str, str | None] = {}

    def wanted(job_id: str) -> bool:  # the job's pool, looked up once per job
        if job_id not in pool_of:
            job = door.store.get_job(job_id)
            p = job.pool if job else None
            readable = p is not None and decide(who, "job.read", p, pools, door.admin_groups).allowed
            pool_of[job_id] = p if readable else None
        p = pool_of[job_id]
        return p is not None and (p == pool or p.startswith(pool.rstrip("/") + "/"))
    lines = stream.task_events(door.settings, wanted, since_ms=since_ms, resume=stream.Position.parse(last_event_id),
                               follow=follow)
    return event_stream(request, lines)
