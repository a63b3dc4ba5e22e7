"""Tasks: a job's tasks queried, one task's current run, its state changes, and a run's output
fetched from the agent of the host that ran it."""

from __future__ import annotations

from typing import Annotated

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse

from peloton.store.base import TaskRow
from pelotonctl import queries
from pelotonctl.api import logs
from pelotonctl.api.door import Door, DoorDep, Refused
from pelotonctl.api.health import StageWords, behind_the_job, stage_words_of
from pelotonctl.api.identity import Creds
from pelotonctl.api.storeguard import answering
from pelotonctl.shapes import event_row, task_info

router = APIRouter(tags=["tasks"], dependencies=[Depends(answering)])


async def grant_key_of(request: Request) -> Ed25519PrivateKey | None:
    # made once by make_app: the key for signing log grants (None: this API signs none)
    return request.app.state.grant_key


def task_of(door: Door, job_id: str, instance: int) -> TaskRow:
    task = next((t for t in door.store.tasks_of_job(job_id) if t.instance == instance), None)
    if task is None:
        raise Refused(404, f"no instance {instance} of job {job_id}")
    return task


@router.get("/v1/jobs/{job_id}/tasks",
            summary="A job's tasks, every one or by state, name and host, sorted and paged: Peloton's task query; "
                    "with the stages the job waits on that are not doing their part, and the silent hosts of "
                    "the tasks listed")
def list_tasks(job_id: str, creds: Creds, door: DoorDep, words: Annotated[StageWords | None, Depends(stage_words_of)],
               state: Annotated[list[str], Query(description="Task states (Peloton's words, comma lists "
                                                            "too); any may match")] = [],
               name: Annotated[list[str], Query(description="Task names (the config's name); any")] = [],
               host: Annotated[list[str], Query(description="Hosts of the current runs; any")] = [],
               sort: Annotated[list[str], Query(description="Properties to sort by: " + ", ".join(
                   queries.TASK_SORT) + " (default: instance)")] = [],
               order: Annotated[str, Query(description="ASC or DESC")] = "ASC",
               limit: Annotated[int | None, Query(ge=1, le=1_000_000, description="At most this many (default: "
                                                                                  "all)")] = None,
               offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0) -> dict:
    job = door.readable_job(job_id, creds)
    query = queries.TaskQuery(tuple(queries.task_states(queries.words(state))), tuple(queries.words(name)),
                              tuple(queries.words(host)), tuple(queries.words(sort)), queries.sort_order(order),
                              offset, limit)
    rows, matched = queries.query_tasks(door.store, job, query)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return {"tasks": rows, "total": matched,
            **behind_the_job(door, words, job_id, job.state, counts, {r["host"] for r in rows if r["host"]})}


@router.get("/v1/jobs/{job_id}/tasks/{instance}", summary="One task's current run")
def get_task(job_id: str, instance: int, creds: Creds, door: DoorDep) -> dict:
    door.readable_job(job_id, creds)
    return task_info(job_id, task_of(door, job_id, instance))


@router.get("/v1/jobs/{job_id}/tasks/{instance}/events", summary="Every state change of a task")
def task_events(job_id: str, instance: int, creds: Creds, door: DoorDep) -> dict:
    door.readable_job(job_id, creds)
    return {"events": [event_row(e) for e in door.store.task_events(job_id) if e["instance"] == instance]}


@router.get("/v1/jobs/{job_id}/tasks/{instance}/logs", response_class=PlainTextResponse,
            summary="A run's stdout or stderr, from the host that ran it (its agent serves it to the API)")
def task_logs(job_id: str, instance: int, creds: Creds, door: DoorDep,
              grant_key: Annotated[Ed25519PrivateKey | None, Depends(grant_key_of)],
              run: Annotated[int | None, Query(ge=1)] = None,
              file: Annotated[str, Query(pattern="^(stdout|stderr)$")] = "stdout",
              offset: Annotated[int, Query(ge=0)] = 0,
              limit: Annotated[int, Query(ge=0, le=4 * 1024 * 1024)] = 4 * 1024 * 1024) -> PlainTextResponse:
    door.readable_job(job_id, creds)  # only then does the API sign a grant for the run's output
    data, size = logs.run_output(door.store, door.hosts(), grant_key, task_of(door, job_id, instance), run, file,
                                 offset, limit)
    return PlainTextResponse(data, headers={"X-File-Size": str(size)})
