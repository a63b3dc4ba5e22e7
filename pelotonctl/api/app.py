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
from collections.abc import AsyncIterator, Callable

from confluent_kafka import KafkaException
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from peloton.config import Settings
from peloton.runtime import BrokerUnavailable, CompactedView, DeliveryError, Emitter, StaticView
from peloton.store import store_unavailable
from peloton.store.base import StorageGateway
from pelotonctl import admin
from pelotonctl.api import logs
from pelotonctl.api.audit import Audit
from pelotonctl.api.door import Door, Refused
from pelotonctl.api.identity import Unauthenticated
from pelotonctl.api.operations import Operations
from pelotonctl.api.routes import (
    events,
    hosts,
    jobs,
    operations,
    probes,
    resmgr,
    respools,
    tasks,
    tokens,
    updates,
    volumes,
)

# In the order their paths appear in the OpenAPI document.
ROUTERS = (probes.router, jobs.router, updates.router, tasks.router, events.router, volumes.router, respools.router,
           hosts.router, resmgr.router, tokens.router, operations.router)


def make_app(settings: Settings, store: StorageGateway, out: Emitter, audit: Audit,
             hosts_view: CompactedView | StaticView | None = None, sample_lag: bool = False) -> FastAPI:
    """The API over `store`, sending commands through `out` and decisions to `audit`; its routes
    share one Door, one log-grant key and one lag sampler, kept in app.state. With sample_lag the
    sampler starts with the app (the served API: its /metrics has every group's lag from the
    start); else on the first request that reads it (tests that never do start no process)."""
    from importlib.metadata import version

    door = Door(settings, store, out, audit, hosts_view)
    grant_key = logs.grant_key(settings)  # read once, here: a bad key stops the API at its start
    ops = Operations(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if sample_lag:
            ops.start()
        yield
        door.close()
        ops.close()

    app = FastAPI(title="Peloton on Kafka", version=version("peloton-kafka"), description=__doc__, lifespan=lifespan)
    app.state.door, app.state.grant_key, app.state.operations = door, grant_key, ops
    _answer_errors(app, settings)
    for router in ROUTERS:
        app.include_router(router)
    return app


def _answer_errors(app: FastAPI, settings: Settings) -> None:
    """Each exception a route lets out, as the status and detail the module docstring promises."""
    def detail(status: int) -> Callable[[Request, Exception], JSONResponse]:
        return lambda _request, exc: JSONResponse({"detail": str(exc)}, status_code=status)

    def unavailable(what: str) -> Callable[[Request, Exception], JSONResponse]:
        return lambda _request, exc: JSONResponse({"detail": f"{what} is unavailable: {exc}"}, status_code=503)

    app.add_exception_handler(Unauthenticated, lambda _request, exc: JSONResponse(
        {"detail": str(exc)}, status_code=401, headers={"WWW-Authenticate": "Bearer"}))
    app.add_exception_handler(Refused, lambda _request, exc: JSONResponse({"detail": exc.reason},
                                                                          status_code=exc.status))
    app.add_exception_handler(admin.NotFound, detail(404))
    app.add_exception_handler(admin.UserError, detail(400))
    app.add_exception_handler(logs.NoLogs, detail(404))
    app.add_exception_handler(logs.LogsUnavailable, detail(503))
    for kind in (KafkaException, DeliveryError, BrokerUnavailable):
        app.add_exception_handler(kind, unavailable(f"the broker at {settings.bootstrap}"))
    for kind in store_unavailable(every_backend=True):
        app.add_exception_handler(kind, unavailable("the store"))
