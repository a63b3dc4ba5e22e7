"""The API's resources, as Peloton names them: jobs and their tasks, resource pools, the resource
manager's tasks and queues, hosts, and the tokens that say who is asking. Every request but
/healthz and /metrics carries a bearer token; every decision on it (allowed or refused, with the
reason) goes to the audit topic first.

Answers: 200/201 with JSON; 400 for input the job manager would refuse (the message `job
validate` gives); 401 without a valid token; 403 with the reason a permission was refused; 404
for what does not exist; 503 when the broker or the store is away. Commands answer with their
command id once the broker has them; their effect follows (poll the job, or wait=true)."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Annotated

from confluent_kafka import KafkaException
from fastapi import FastAPI, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, Field

from peloton.auth.permissions import PoolsAbove, decide
from peloton.auth.tokens import Principal, issue
from peloton.config import Settings
from peloton.model.pool import leaf_pool_error
from peloton.runtime import BrokerUnavailable, CompactedView, DeliveryError, Emitter, now_ms
from peloton.store import CLAIMS_KEPT_MS, store_unavailable
from peloton.store.base import StorageGateway
from pelotonctl import admin, queries
from peloton.auth.identities import Identities
from pelotonctl.api.audit import Audit
from pelotonctl.api.identity import Creds, Unauthenticated, principal_of
from pelotonctl.api.operations import add_operations
from pelotonctl.api import logs, stream
from pelotonctl.shapes import event_row, job_info, job_row, task_info, token_row, update_info
from stages.admit.workflow import ACTIONS, UpdateOptions
from pelotonctl.watch import job_summary

# ?wait=true on a job command: answer once the job manager acted on it, or refused it (400).
Wait = Annotated[bool, Query(description="Answer once the job manager has acted on the command (up to 30 s); "
                                         "400 with its reason if it refused")]


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


class PoolConfig(BaseModel):
    config: str = Field(description="A Peloton respool YAML")
    force: bool = Field(False, description="update: store it even if it breaks a rule of the tree")


class Maintenance(BaseModel):
    force: bool = Field(False, description="start: drain even the last UP host, or past PELOTON_MAX_DRAIN_SHARE")


class TokenRequest(BaseModel):
    user: str
    groups: list[str] = []
    admin: bool = False


class Refused(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class Door:
    """What every request needs: who asks, whether they may, and one producer and one view of the
    hosts shared by all requests (making either costs about a second)."""

    def __init__(self, settings: Settings, store: StorageGateway, out: Emitter, audit: Audit, hosts_view=None):
        self.settings, self.store, self.out, self.audit = settings, store, out, audit
        self.admin_groups = settings.admin_group_set()
        self._send = threading.Lock()
        self._hosts_lock = threading.Lock()
        self._hosts = hosts_view  # made on first use: a CompactedView of host-state (a StaticView in tests)
        self.identities = Identities.from_settings(settings, store)

    def who(self, creds: HTTPAuthorizationCredentials | None, action: str, obj: str) -> Principal:
        header = f"{creds.scheme} {creds.credentials}" if creds else None
        try:
            return principal_of(header, self.identities)
        except Unauthenticated as exc:
            self.audit.record(None, action, obj, None, False, str(exc))
            raise

    def may(self, principal: Principal, action: str, pool: str) -> bool:
        """Whether the principal may act so on the pool (asked, not audited: nothing is done)."""
        return decide(principal, action, pool, PoolsAbove(self.store.get_pool), self.admin_groups).allowed

    def allow(self, principal: Principal, action: str, obj: str, pool: str | None = None) -> None:
        decision = decide(principal, action, pool, PoolsAbove(self.store.get_pool), self.admin_groups)
        self.audit.record(principal, action, obj, pool, decision.allowed, decision.reason)
        if not decision.allowed:
            raise Refused(403, f"{action} on {obj} refused: {decision.reason}")

    def hosts(self) -> list[dict]:
        """Every host-state record, from a view kept up to date across requests."""
        with self._hosts_lock:
            if self._hosts is None:
                self._hosts = CompactedView(self.settings, "host-state", quiet=True)
                self._hosts.catch_up(timeout=3.0)
            else:
                self._hosts.poll(0.0)
            return list(self._hosts.values.values())

    def send(self, fn, *args, **kwargs):
        """An admin call that produces, through the shared producer, one at a time."""
        with self._send:
            return fn(*args, out=self.out, **kwargs)

    def job(self, job_id: str):
        job = self.store.get_job(job_id)
        if job is None:
            raise Refused(404, f"no job {job_id}")
        return job

    def close(self) -> None:
        with self._hosts_lock:
            if self._hosts is not None:
                self._hosts.close()
                self._hosts = None


def make_app(settings: Settings, store: StorageGateway, out: Emitter, audit: Audit, hosts_view=None) -> FastAPI:
    from importlib.metadata import version

    door = Door(settings, store, out, audit, hosts_view)
    grant_key = logs.grant_key(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        door.close()
        operations.close()

    app = FastAPI(title="Peloton on Kafka", version=version("peloton-kafka"), description=__doc__, lifespan=lifespan)
    app.state.door = door

    def unavailable(what: str):
        return lambda _request, exc: JSONResponse({"detail": f"{what} is unavailable: {exc}"}, status_code=503)

    @app.exception_handler(Unauthenticated)
    def _unauthenticated(_request, exc: Unauthenticated):
        return JSONResponse({"detail": str(exc)}, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(Refused)
    def _refused(_request, exc: Refused):
        return JSONResponse({"detail": exc.reason}, status_code=exc.status)

    @app.exception_handler(admin.NotFound)
    def _not_found(_request, exc):
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(admin.UserError)
    def _user_error(_request, exc):
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(logs.NoLogs)
    def _no_logs(_request, exc):
        return JSONResponse({"detail": str(exc)}, status_code=404)

    app.add_exception_handler(logs.LogsUnavailable, lambda _request, exc: JSONResponse({"detail": str(exc)},
                                                                                       status_code=503))
    for kind in (KafkaException, DeliveryError, BrokerUnavailable):
        app.add_exception_handler(kind, unavailable(f"the broker at {settings.bootstrap}"))
    for kind in store_unavailable(every_backend=True):
        app.add_exception_handler(kind, unavailable("the store"))

    # -- open to anyone: probes ---------------------------------------------------------------
    @app.get("/healthz", tags=["probes"], summary="Liveness: the process answers")
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/metrics", tags=["probes"], summary="Prometheus metrics of this instance",
             response_class=PlainTextResponse)
    def metrics() -> str:
        from prometheus_client import generate_latest

        return generate_latest().decode()

    # -- jobs ---------------------------------------------------------------------------------
    @app.post("/v1/jobs", tags=["jobs"], status_code=201, summary="Validate a job and submit it to a pool")
    def create_job(body: JobCreate, creds: Creds,
                   wait: Annotated[bool, Query(description="Answer once the job manager has stored the job "
                                                           "(up to 30 s), with its state; 400 with its reason if "
                                                           "it refused")] = False) -> dict:
        who = door.who(creds, "job.create", body.pool)
        pools = store.list_pools()
        if body.pool not in pools:  # refused as the job manager refuses it, before any permission
            raise Refused(400, leaf_pool_error(pools, body.pool))
        door.allow(who, "job.create", body.pool, body.pool)
        command_id = _new_id()
        hosts = admin.distinct_capacities(door.hosts())
        job_id = door.send(admin.submit_job, settings, store, body.pool, body.config, body.job_id, hosts=hosts,
                           requested_by=who.user, command_id=command_id,
                           may_read=lambda pool: door.may(who, "job.read", pool))
        answer = {"job_id": job_id, "command_id": command_id}
        if wait:
            settle(answer)
            job = store.get_job(job_id)
            answer["state"] = job.state if job else None  # None: not stored yet (the job manager is behind)
        return answer

    def settle(answer: dict) -> None:
        """Wait until the job manager has handled the command: its outcome goes into `answer`; a
        refusal is a 400 with the job manager's reason (nothing was done)."""
        deadline = time.monotonic() + settings.command_wait_s
        while (outcome := store.command_outcome(answer["command_id"])) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        answer["outcome"] = outcome["state"] if outcome else "pending"  # pending: the job manager is behind
        if outcome and outcome["state"] == "refused":
            raise Refused(400, f"refused by the job manager: {outcome['reason']}")

    @app.get("/v1/jobs", tags=["jobs"], summary="Jobs the caller may read, most recent first (or as sorted), a page "
                                                "at a time: Peloton's job query")
    def query_jobs(creds: Creds, state: Annotated[list[str], Query(description="Job states (Peloton's words, "
                                                                               "comma lists too); any may match")] = [],
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
        pools = store.list_pools()

        def readable(pool_path: str) -> bool:  # jobs the caller may not read are skipped, not refused
            return decide(who, "job.read", pool_path, pools, door.admin_groups).allowed
        jobs = queries.query_jobs(store, query, readable)
        return {"jobs": [job_row(j) for j in jobs[:limit]], "next_offset": offset + limit if len(jobs) > limit else None}

    def readable_job(job_id: str, creds):
        who = door.who(creds, "job.read", job_id)
        job = door.job(job_id)
        door.allow(who, "job.read", job_id, job.pool)
        return job

    @app.get("/v1/jobs/{job_id}", tags=["jobs"], summary="A job's config (the current one, or a version's) and runtime")
    def get_job(job_id: str, creds: Creds,
                version: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="A config version")] = None) -> dict:
        return job_info(store, readable_job(job_id, creds), version, settings.job_retention_s)

    @app.get("/v1/jobs/{job_id}/status", tags=["jobs"], summary="A job's state, task counts and why it waits")
    def job_status(job_id: str, creds: Creds,
                   why: Annotated[bool, Query(description="Also why its gangs wait and its failed runs")] = True) -> dict:
        readable_job(job_id, creds)
        return job_summary(store, job_id, settings if why else None)

    def control(kind: str, job_id: str, creds, instances: str | None = None, options: UpdateOptions | None = None,
                config: str | None = None, wait: bool = False) -> dict:
        action = f"job.{kind.lower()}"
        who = door.who(creds, action, job_id)
        job = door.job(job_id)
        door.allow(who, action, job_id, job.pool)
        answer = door.send(admin.control_job, settings, store, kind, job_id, instances, config=config,
                           requested_by=who.user, options=options)
        if wait:
            settle(answer)
        return answer

    @app.post("/v1/jobs/{job_id}/stop", tags=["jobs"], summary="Stop a job, or some of its instances")
    def stop_job(job_id: str, creds: Creds, body: JobControl = JobControl(), wait: Wait = False) -> dict:
        return control("STOP", job_id, creds, body.instances, UpdateOptions(batch_size=body.batch_size), wait=wait)

    @app.post("/v1/jobs/{job_id}/start", tags=["jobs"], summary="Run stopped instances again")
    def start_job(job_id: str, creds: Creds, body: JobControl = JobControl(), wait: Wait = False) -> dict:
        return control("START", job_id, creds, body.instances, UpdateOptions(batch_size=body.batch_size), wait=wait)

    @app.post("/v1/jobs/{job_id}/restart", tags=["jobs"], summary="Replace running tasks with new runs")
    def restart_job(job_id: str, creds: Creds, body: JobControl = JobControl(), wait: Wait = False) -> dict:
        return control("RESTART", job_id, creds, body.instances,
                       UpdateOptions(batch_size=body.batch_size, start_paused=body.start_paused,
                                     in_place=body.in_place), wait=wait)

    @app.put("/v1/jobs/{job_id}", tags=["jobs"], summary="A new config version for a job")
    def update_job(job_id: str, body: JobUpdate, creds: Creds, wait: Wait = False) -> dict:
        return control("UPDATE", job_id, creds, None, body.options(), body.config, wait=wait)

    @app.delete("/v1/jobs/{job_id}", tags=["jobs"], summary="Delete a terminal job with its tasks and events")
    def delete_job(job_id: str, creds: Creds, wait: Wait = False) -> dict:
        return control("DELETE", job_id, creds, wait=wait)

    @app.get("/v1/jobs/{job_id}/commands/{command_id}", tags=["jobs"],
             summary="What the job manager did with a command: applied, refused (with its reason) or pending")
    def command_status(job_id: str, command_id: str, creds: Creds) -> dict:
        who = door.who(creds, "job.read", job_id)
        outcome = store.command_outcome(command_id)
        job = store.get_job(job_id)
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

    # -- updates: every restart and update is a workflow with an id -----------------------------
    @app.get("/v1/jobs/{job_id}/updates", tags=["updates"], summary="A job's updates and restarts, newest first")
    def list_updates(job_id: str, creds: Creds) -> dict:
        readable_job(job_id, creds)
        return {"updates": [update_info(u) for u in store.updates_of_job(job_id)]}

    def update_of(update_id: str, creds, action: str):
        who = door.who(creds, action, update_id)
        wf = store.get_update(update_id)
        if wf is None:
            raise Refused(404, f"no update {update_id}")
        job = door.job(wf["job_id"])
        door.allow(who, action, update_id, job.pool)
        return who, wf

    @app.get("/v1/updates/{update_id}", tags=["updates"],
             summary="An update's state, its instances done, failed and in flight, and why it is where it is")
    def get_update(update_id: str, creds: Creds) -> dict:
        return update_info(update_of(update_id, creds, "job.read")[1])

    @app.post("/v1/updates/{update_id}/{action}", tags=["updates"],
              summary="pause, resume, abort or rollback an update in progress")
    def steer_update(update_id: str, action: str, creds: Creds, wait: Wait = False) -> dict:
        kind = action.upper()
        if kind not in ACTIONS:
            raise Refused(404, f"no action {action!r} on an update (pause, resume, abort, rollback)")
        who, _ = update_of(update_id, creds, f"update.{action.lower()}")
        answer = door.send(admin.steer_update, settings, store, update_id, kind, requested_by=who.user)
        if wait:
            settle(answer)
            answer["state"] = (store.get_update(update_id) or {}).get("state")
        return answer

    # -- tasks --------------------------------------------------------------------------------
    def task_of(job_id: str, instance: int):
        task = next((t for t in store.tasks_of_job(job_id) if t.instance == instance), None)
        if task is None:
            raise Refused(404, f"no instance {instance} of job {job_id}")
        return task

    @app.get("/v1/jobs/{job_id}/tasks", tags=["tasks"],
             summary="A job's tasks, every one or by state, name and host, sorted and paged: Peloton's task query")
    def list_tasks(job_id: str, creds: Creds,
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
        job = readable_job(job_id, creds)
        query = queries.TaskQuery(tuple(queries.task_states(queries.words(state))), tuple(queries.words(name)),
                                  tuple(queries.words(host)), tuple(queries.words(sort)), queries.sort_order(order),
                                  offset, limit)
        rows, matched = queries.query_tasks(store, job, query)
        return {"tasks": rows, "total": matched}

    @app.get("/v1/jobs/{job_id}/tasks/{instance}", tags=["tasks"], summary="One task's current run")
    def get_task(job_id: str, instance: int, creds: Creds) -> dict:
        readable_job(job_id, creds)
        return task_info(job_id, task_of(job_id, instance))

    @app.get("/v1/jobs/{job_id}/tasks/{instance}/events", tags=["tasks"], summary="Every state change of a task")
    def task_events(job_id: str, instance: int, creds: Creds) -> dict:
        readable_job(job_id, creds)
        return {"events": [event_row(e) for e in store.task_events(job_id) if e["instance"] == instance]}

    @app.get("/v1/jobs/{job_id}/tasks/{instance}/logs", tags=["tasks"], response_class=PlainTextResponse,
             summary="A run's stdout or stderr, from the host that ran it (its agent serves it to the API)")
    def task_logs(job_id: str, instance: int, creds: Creds, run: Annotated[int | None, Query(ge=1)] = None,
                  file: Annotated[str, Query(pattern="^(stdout|stderr)$")] = "stdout",
                  offset: Annotated[int, Query(ge=0)] = 0,
                  limit: Annotated[int, Query(ge=0, le=4 * 1024 * 1024)] = 4 * 1024 * 1024) -> PlainTextResponse:
        readable_job(job_id, creds)  # only then does the API sign a grant for the run's output
        data, size = logs.run_output(store, door.hosts(), grant_key, task_of(job_id, instance), run, file, offset,
                                     limit)
        return PlainTextResponse(data, headers={"X-File-Size": str(size)})

    # -- task events as they happen ---------------------------------------------------------
    def event_stream(request: Request, lines) -> StreamingResponse:
        """Lines of a task_events generator as SSE, read in a worker thread, until the client goes."""
        async def sse():
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

    @app.get("/v1/jobs/{job_id}/events", tags=["tasks"],
             summary="The job's task events as Server-Sent Events, from its creation on; resumable with Last-Event-ID")
    def job_events(job_id: str, request: Request, creds: Creds,
                   follow: Annotated[bool, Query(description="Go on as events come (false: stop at the end)")] = True,
                   last_event_id: Annotated[str | None, Header()] = None) -> StreamingResponse:
        job = readable_job(job_id, creds)
        lines = stream.task_events(settings, lambda j: j == job_id, job_id=job_id,
                                   since_ms=job.created_ms - 60_000, resume=stream.Position.parse(last_event_id),
                                   follow=follow)
        return event_stream(request, lines)

    @app.get("/v1/events", tags=["tasks"],
             summary="Task events of every job in a pool (and the pools below it) that the caller may read, "
                     "as Server-Sent Events, from now (or since_ms) on; resumable with Last-Event-ID")
    def pool_events(pool: str, request: Request, creds: Creds, since_ms: int | None = None,
                    follow: bool = True, last_event_id: Annotated[str | None, Header()] = None) -> StreamingResponse:
        who = door.who(creds, "job.read", pool)
        pools = store.list_pools()
        if pool not in pools:
            raise Refused(404, f"no resource pool {pool}")
        door.allow(who, "job.read", pool, pool)
        pool_of: dict[str, str | None] = {}

        def wanted(job_id: str) -> bool:  # the job's pool, looked up once per job
            if job_id not in pool_of:
                job = store.get_job(job_id)
                p = job.pool if job else None
                readable = p is not None and decide(who, "job.read", p, pools, door.admin_groups).allowed
                pool_of[job_id] = p if readable else None
            p = pool_of[job_id]
            return p is not None and (p == pool or p.startswith(pool.rstrip("/") + "/"))
        lines = stream.task_events(settings, wanted, since_ms=since_ms, resume=stream.Position.parse(last_event_id),
                                   follow=follow)
        return event_stream(request, lines)

    # -- resource pools -----------------------------------------------------------------------
    @app.get("/v1/respools", tags=["respools"], summary="The pool tree, every pool's config")
    def list_pools(creds: Creds) -> dict:
        door.allow(door.who(creds, "pool.read", "/"), "pool.read", "/")
        from peloton.model.pool import pool_tree

        return pool_tree(store.list_pools())

    @app.get("/v1/respools/{path:path}", tags=["respools"], summary="A pool's shares and its usage now")
    def get_pool(path: str, creds: Creds) -> dict:
        path = "/" + path.strip("/")
        door.allow(door.who(creds, "pool.read", path), "pool.read", path, path)
        return admin.pool_report(settings, store, path)

    @app.post("/v1/respools/{path:path}", tags=["respools"], status_code=201, summary="Create a pool (admins)")
    def create_pool(path: str, body: PoolConfig, creds: Creds) -> dict:
        path = "/" + path.strip("/")
        door.allow(door.who(creds, "pool.create", path), "pool.create", path, path)
        return admin.create_pool(settings, store, path, body.config)

    @app.put("/v1/respools/{path:path}", tags=["respools"], summary="Replace a pool's config (admins)")
    def update_pool(path: str, body: PoolConfig, creds: Creds) -> dict:
        path = "/" + path.strip("/")
        door.allow(door.who(creds, "pool.update", path), "pool.update", path, path)
        return admin.update_pool(settings, store, path, body.config, body.force)

    @app.delete("/v1/respools/{path:path}", tags=["respools"], summary="Delete a leaf pool with no job (admins)")
    def delete_pool(path: str, creds: Creds) -> dict:
        path = "/" + path.strip("/")
        door.allow(door.who(creds, "pool.delete", path), "pool.delete", path, path)
        admin.delete_pool(settings, store, path)
        return {"deleted": path}

    # -- hosts --------------------------------------------------------------------------------
    @app.get("/v1/hosts", tags=["hosts"], summary="Every host: state, free and total room, runs, labels, and "
                                                  "why runs wait on a draining host")
    def list_hosts(creds: Creds, state: Annotated[list[str], Query(
            description="Host states (UP, DRAINING, DRAINED, DOWN, or Peloton's HOST_STATE_UP...); any")] = []) -> dict:
        door.allow(door.who(creds, "host.read", "hosts"), "host.read", "hosts")
        states = queries.host_states(queries.words(state))
        rows = [admin.host_row(h) for h in sorted(door.hosts(), key=lambda r: r["host_id"])
                if not states or h["state"] in states]
        return {"hosts": admin.with_drain_waits(settings, store, rows)}

    # -- the resource manager's view: its tasks and its pools' queues ---------------------------
    def readable_scope(creds, job_id: str | None, pool: str | None):
        """Who asks, and which pools they may read: a job or a pool named must be theirs (403),
        and of the rest, what they may not read is skipped."""
        who = door.who(creds, "job.read", job_id or pool or "resmgr")
        pools = store.list_pools()
        if job_id:
            door.allow(who, "job.read", job_id, door.job(job_id).pool)
        elif pool and pool.rstrip("/") in pools:
            door.allow(who, "job.read", pool.rstrip("/"), pool.rstrip("/"))
        return lambda path: decide(who, "job.read", path, pools, door.admin_groups).allowed

    @app.get("/v1/resmgr/tasks", tags=["resmgr"],
             summary="The task runs the resource manager tracks (queued in a pool, or admitted) with the job "
                     "manager's state of each: Peloton's resmgr active tasks")
    def resmgr_tasks(creds: Creds, job: str | None = None,
                     pool: Annotated[str | None, Query(description="A pool path: it and the pools below it")] = None,
                     state: Annotated[list[str], Query(description="Task states; any")] = []) -> dict:
        readable = readable_scope(creds, job, pool)
        states = queries.task_states(queries.words(state))
        return {"tasks": queries.resmgr_tasks(store, job, pool, states, readable)}

    @app.get("/v1/resmgr/pending", tags=["resmgr"],
             summary="The gangs waiting in the pools' queues, in admission order: Peloton's resmgr pending tasks")
    def resmgr_pending(creds: Creds,
                       pool: Annotated[str | None, Query(description="A pool path: it and the pools below it "
                                                                      "(default: every pool)")] = None,
                       limit: Annotated[int, Query(ge=1, le=100_000, description="Gangs a pool")] = 100) -> dict:
        readable = readable_scope(creds, None, pool)
        return {"gangs": queries.pending_gangs(store, pool, limit, readable)}

    @app.post("/v1/hosts/{host_id}/maintenance/{action}", tags=["hosts"],
              summary="Drain a host (start) or bring it back (complete) (admins)")
    def maintenance(host_id: str, action: str, creds: Creds, body: Maintenance = Maintenance()) -> dict:
        who = door.who(creds, "host.maintenance", host_id)
        door.allow(who, "host.maintenance", host_id)
        if action not in ("start", "complete"):
            raise Refused(404, f"no maintenance action {action!r}: start or complete")
        admin.request_maintenance(settings, host_id, action.upper(), who=who.user, force=body.force)
        return {"host_id": host_id, "maintenance": action}

    # -- tokens -------------------------------------------------------------------------------
    @app.post("/v1/tokens", tags=["tokens"], status_code=201, summary="Issue a token (admins); shown only here")
    def issue_token(body: TokenRequest, creds: Creds) -> dict:
        door.allow(door.who(creds, "token.issue", body.user), "token.issue", body.user)
        try:
            token, row = issue(body.user, body.groups, body.admin, now_ms())
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        store.add_token(row)
        return {"token": token, "token_id": row.token_id, "user": row.user, "groups": list(row.groups),
                "admin": row.admin}

    @app.get("/v1/tokens", tags=["tokens"], summary="Every token: id, user, groups, admin, issued, revoked (admins)")
    def list_tokens(creds: Creds) -> dict:
        door.allow(door.who(creds, "token.list", "tokens"), "token.list", "tokens")
        return {"tokens": [token_row(t) for t in store.list_tokens()]}

    @app.delete("/v1/tokens/{token_id}", tags=["tokens"], summary="Revoke a token (admins)")
    def revoke_token(token_id: str, creds: Creds) -> dict:
        door.allow(door.who(creds, "token.revoke", token_id), "token.revoke", token_id)
        if not store.revoke_token(token_id, now_ms()):
            raise Refused(404, f"no token {token_id} that is not revoked already")
        return {"revoked": token_id}

    operations = add_operations(app, door, Refused)
    return app


def _new_id() -> str:
    return uuid.uuid4().hex
