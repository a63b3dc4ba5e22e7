"""Jobs: submit one to a pool, query them, read one's config and state, and the job commands
(stop, start, restart, update, delete) with what the job manager did with each."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, Field

from peloton.auth.permissions import decide
from peloton.auth.tokens import Principal
from peloton.model.pool import leaf_pool_error
from peloton.store import CLAIMS_KEPT_MS
from pelotonctl import admin, queries, volumes
from pelotonctl.api.door import Door, DoorDep, Refused, Wait
from pelotonctl.api.health import StageWords, behind_the_job, stage_words_of
from pelotonctl.api.identity import Creds
from pelotonctl.api.storeguard import answering
from pelotonctl.shapes import job_info, job_row
from pelotonctl.watch import job_summary
from stages.admit.workflow import UpdateOptions

router = APIRouter(tags=["jobs"], dependencies=[Depends(answering)])


class JobCreate(BaseModel):
    pool: str = Field(description="Resource pool path, e.g. /DefaultResPool")
    config: str = Field(description="The job's Peloton YAML, as a file would hold it")
    job_id: str | None = Field(None, description="An id of your own (a UUID is made otherwise)")


class JobControl(BaseModel):
    instances: str | None = Field(None, description="Ranges, e.g. 0-3,7 or Peloton's half-open 0:4 "
                                                    "(default: every instance)")
    batch_size: int = Field(0, ge=0, le=1_000_000, description="Tasks replaced (restart), stopped or started at a "
                                                               "time; 0: all at once. Above 0 the command is a "
                                                               "workflow with an id (`update get`)")
    start_paused: bool = Field(False, description="restart: the workflow waits for a resume before its first batch")
    in_place: bool = Field(False, description="restart: each new run prefers the host of the run it replaces")


class JobUpdate(BaseModel):
    config: str = Field(description="The new config version (Peloton YAML)")
    batch_size: int = Field(0, ge=0, le=1_000_000, description="Tasks replaced at a time; 0: updateConfig.batchSize "
                                                               "or all")
    max_instance_retries: int = Field(0, ge=0, le=1_000_000, description="Failed new runs before an instance counts "
                                                                         "as failed; 0: never")
    max_failure_instances: int = Field(0, ge=0, le=1_000_000, description="Failed instances before the update fails; "
                                                                          "0: never")
    rollback_on_failure: bool = Field(False, description="A failed update restores the previous config")
    start_paused: bool = Field(False, description="The workflow waits for a resume before its first batch")
    in_place: bool = Field(False, description="Each new run prefers the host of the run it replaces "
                                              "(updateConfig.inPlace)")

    def options(self) -> UpdateOptions:
        return UpdateOptions(self.batch_size, self.max_instance_retries, self.max_failure_instances,
                             self.rollback_on_failure, self.start_paused, self.in_place)


@router.post("/v1/jobs", status_code=201, summary="Validate a job and submit it to a pool")
def create_job(body: JobCreate, creds: Creds, door: DoorDep,
               wait: Annotated[bool, Query(description="Answer once the job manager has stored the job "
                                                       "(up to 30 s), with its state; 400 with its reason if "
                                                       "it refused")] = False) -> dict:
    who = door.who(creds, "job.create", body.pool)
    pools = door.store.list_pools()
    if body.pool not in pools:  # refused as the job manager refuses it, before any permission
        raise Refused(400, leaf_pool_error(pools, body.pool))
    door.allow(who, "job.create", body.pool, body.pool)
    command_id = _new_id()
    hosts = admin.distinct_capacities(door.hosts())
    job_id = door.send(admin.submit_job, door.settings, door.store, body.pool, body.config, body.job_id, hosts=hosts,
                       requested_by=who.user, command_id=command_id,
                       may_read=lambda pool: door.may(who, "job.read", pool))
    answer = {"job_id": job_id, "command_id": command_id}
    if wait:
        door.settle(answer)
        job = door.store.get_job(job_id)
        answer["state"] = job.state if job else None  # None: not stored yet (the job manager is behind)
    return answer


@router.get("/v1/jobs", summary="Jobs the caller may read, most recent first (or as sorted), a page at a time: "
                                "Peloton's job query")
def query_jobs(creds: Creds, door: DoorDep,
               state: Annotated[list[str], Query(description="Job states (Peloton's words, comma lists too); any "
                                                             "may match")] = [],
               pool: str | None = None, owner: str | None = None, name: str | None = None,
               label: Annotated[list[str], Query(description="KEY=VALUE; all must match")] = [],
               keyword: Annotated[list[str], Query(description="Words that must all occur in the job's "
                                                               "config, any case")] = [],
               created_since_ms: Annotated[int | None, Query(
                   ge=0, le=2**62, description="Only jobs created at or after this time")] = None,
               sort: Annotated[list[str], Query(description="Properties to sort by: " + ", ".join(
                   queries.JOB_SORT))] = ["creation_time"],
               order: Annotated[str, Query(description="ASC or DESC")] = "DESC",
               total: Annotated[int | None, Query(ge=1, le=1_000_000, description="Peloton's maxLimit: the "
                                                  "most jobs the query yields, before the page")] = None,
               limit: Annotated[int, Query(ge=1, le=1000)] = 100,
               offset: Annotated[int, Query(ge=0, le=100_000)] = 0) -> dict:
    who = door.who(creds, "job.read", "jobs")
    query = queries.JobQuery(
        tuple(queries.job_states(queries.words(state))), pool, owner, name,
        queries.labels_of(queries.words(label)), tuple(queries.words(keyword)), created_since_ms,
        tuple(queries.words(sort)) or ("creation_time",), queries.sort_order(order), offset, limit + 1, total)
    pools = door.store.list_pools()

    def readable(pool_path: str) -> bool:  # jobs the caller may not read are skipped, not refused
        return decide(who, "job.read", pool_path, pools, door.admin_groups).allowed
    jobs = queries.query_jobs(door.store, query, readable)
    return {"jobs": [job_row(j) for j in jobs[:limit]], "next_offset": offset + limit if len(jobs) > limit else None}


@router.get("/v1/jobs/{job_id}", summary="A job's config (the current one, or a version's) and runtime")
def get_job(job_id: str, creds: Creds, door: DoorDep,
            version: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="A config version")] = None) -> dict:
    return job_info(door.store, door.readable_job(job_id, creds), version, door.settings.job_retention_s)


@router.get("/v1/jobs/{job_id}/status", summary="A job's state, task counts and why it waits; the stages it waits on "
                                                "that have no live instance or do not keep up, and its silent hosts")
def job_status(job_id: str, creds: Creds, door: DoorDep,
               words: Annotated[StageWords | None, Depends(stage_words_of)],
               why: Annotated[bool, Query(description="Also why its gangs wait, its failed runs, the stages it "
                                                      "waits on that are not doing their part (stage_problems) and "
                                                      "the hosts of its runs whose agents are silent "
                                                      "(silent_hosts)")] = True) -> dict:
    door.readable_job(job_id, creds)
    summary = job_summary(door.store, job_id, door.settings if why else None, door.entitlements, door.hosts)
    if why and summary is not None:
        summary.update(behind_the_job(door, words, job_id, summary["state"], summary["tasks"]))
    return summary


def control(door: Door, kind: str, job_id: str, creds: HTTPAuthorizationCredentials | None,
            instances: str | None = None, options: UpdateOptions | None = None, config: str | None = None,
            wait: bool = False) -> dict:
    """A job command of `kind`, sent once the caller may act so on the job's pool."""
    return _control(door, kind, job_id, creds, instances, options, config, wait)[1]


def _control(door: Door, kind: str, job_id: str, creds: HTTPAuthorizationCredentials | None,
             instances: str | None = None, options: UpdateOptions | None = None, config: str | None = None,
             wait: bool = False) -> tuple[Principal, dict]:
    action = f"job.{kind.lower()}"
    who = door.who(creds, action, job_id)
    job = door.job(job_id)
    door.allow(who, action, job_id, job.pool)
    answer = door.send(admin.control_job, door.settings, door.store, kind, job_id, instances, config=config,
                       requested_by=who.user, options=options)
    if wait:
        door.settle(answer)
    return who, answer


def delete(door: Door, job_id: str, creds: HTTPAuthorizationCredentials | None, wait: bool = False,
           keep_volumes: bool = False) -> dict:
    """A job's deletion, then its persistent volumes' (those not deleted yet) unless kept, once the
    job manager has applied it: without wait its answer is not known, so they are kept (`volume
    delete` removes them). The answer names the volumes deleted (volumes_deleted) and kept
    (volumes_kept)."""
    who, answer = _control(door, "DELETE", job_id, creds, wait=wait)
    answer.update(door.send(volumes.job_deleted_volumes, door.settings, door.store, job_id,
                            keep_volumes or not wait, who.user))
    return answer


@router.post("/v1/jobs/{job_id}/stop", summary="Stop a job, or some of its instances")
def stop_job(job_id: str, creds: Creds, door: DoorDep, body: JobControl = JobControl(), wait: Wait = False) -> dict:
    return control(door, "STOP", job_id, creds, body.instances, UpdateOptions(batch_size=body.batch_size), wait=wait)


@router.post("/v1/jobs/{job_id}/start", summary="Run stopped instances again")
def start_job(job_id: str, creds: Creds, door: DoorDep, body: JobControl = JobControl(), wait: Wait = False) -> dict:
    return control(door, "START", job_id, creds, body.instances, UpdateOptions(batch_size=body.batch_size),
                   wait=wait)


@router.post("/v1/jobs/{job_id}/restart", summary="Replace running tasks with new runs")
def restart_job(job_id: str, creds: Creds, door: DoorDep, body: JobControl = JobControl(),
                wait: Wait = False) -> dict:
    return control(door, "RESTART", job_id, creds, body.instances,
                   UpdateOptions(batch_size=body.batch_size, start_paused=body.start_paused,
                                 in_place=body.in_place), wait=wait)


@router.put("/v1/jobs/{job_id}", summary="A new config version for a job")
def update_job(job_id: str, body: JobUpdate, creds: Creds, door: DoorDep, wait: Wait = False) -> dict:
    return control(door, "UPDATE", job_id, creds, None, body.options(), body.config, wait=wait)


@router.delete("/v1/jobs/{job_id}", summary="Delete a terminal job with its tasks and events, and its persistent "
                                            "volumes unless kept")
def delete_job(job_id: str, creds: Creds, door: DoorDep, wait: Wait = False,
               keep_volumes: Annotated[bool, Query(description="Keep the job's persistent volumes on their "
                                                               "hosts (`volume delete` removes them later)")] = False
               ) -> dict:
    return delete(door, job_id, creds, wait, keep_volumes)


@router.get("/v1/jobs/{job_id}/commands/{command_id}",
            summary="What the job manager did with a command: applied, refused (with its reason) or pending")
def command_status(job_id: str, command_id: str, creds: Creds, door: DoorDep) -> dict:
    who = door.who(creds, "job.read", job_id)
    outcome = door.store.command_outcome(command_id)
    job = door.store.get_job(job_id)
    pool = job.pool if job else (outcome or {}).get("pool")
    if pool is None or (outcome is not None and outcome["job_id"] != job_id):
        # A create the job manager has not handled yet looks the same: nothing is known of it.
        raise Refused(404, f"no job {job_id} with a command {command_id} handled (yet)")
    door.allow(who, "job.read", job_id, pool)
    if outcome is None:  # outcomes are forgotten after CLAIMS_KEPT_MS: pending may be that too
        return {"command_id": command_id, "job_id": job_id, "state": "pending",
                "detail": f"not handled yet, or handled more than {CLAIMS_KEPT_MS // 86_400_000} days ago "
                          "(outcomes are kept that long)"}
    return {"command_id": command_id, "job_id": job_id, **outcome}


def _new_id() -> str:
    return uuid.uuid4().hex
