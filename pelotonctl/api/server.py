"""One API instance: the store, one producer for commands and one for the audit trail, served
by uvicorn (HTTP) and grpcio (Peloton's protobuf services, pelotonctl/api/rpc) until SIGTERM or
Ctrl-C; both ports share one Door. Start as many as wanted; they share nothing but the store and
the broker."""

from __future__ import annotations

import contextlib
import functools
import threading

from peloton.config import Settings
from peloton.store import open_store
from pelotonctl import admin
from pelotonctl.api.app import make_app
from pelotonctl.api.audit import Audit
from pelotonctl.api.door import Door
from pelotonctl.api.health import stage_health
from pelotonctl.api.storeguard import STORE_DEADLINE_S, StoreAway


def serve(settings: Settings, host: str, port: int, grpc_port: int | None = None) -> None:
    """HTTP on port and, unless grpc_port is None, gRPC on grpc_port (0: a free one)."""
    import uvicorn

    if settings.signed_commands and not settings.command_token:
        raise SystemExit("job commands must be signed here (PELOTON_SIGNED_COMMANDS) and this API has no token to "
                         "sign them with: set PELOTON_COMMAND_TOKEN to an admin token (`pelotonctl auth issue "
                         "--user api --admin`)")
    if bool(settings.api_tls_cert) != bool(settings.api_tls_key):
        raise SystemExit("the API's TLS needs both PELOTON_API_TLS_CERT and PELOTON_API_TLS_KEY (PEM files)")
    # PostgreSQL gives up a statement when the API stops waiting for it (storeguard.py).
    store = open_store(settings.store, statement_timeout_s=STORE_DEADLINE_S)
    audit = Audit(admin.emitter(settings, who="api"), settings.flush_timeout_s)
    app = make_app(settings, store, admin.emitter(settings, who="api"), audit, sample_lag=True)
    # job status and task list tell the lag sampler's word on the stages a job waits on.
    app.state.stage_health = functools.partial(stage_health, app.state.operations)
    threading.Thread(target=_warm, args=(app.state.door,), name="views", daemon=True).start()
    rpc = None
    if grpc_port is not None:
        from pelotonctl.api.rpc.server import build

        rpc, bound = build(app.state.door, settings, host, grpc_port)
        rpc.start()
        print(f"gRPC at {host}:{bound}", flush=True)
    tls = {"ssl_certfile": settings.api_tls_cert, "ssl_keyfile": settings.api_tls_key} if settings.api_tls_cert else {}
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", **tls)
    finally:
        if rpc is not None:
            rpc.stop(grace=2).wait()
        store.close()


def _warm(door: Door) -> None:
    """The views read, and the pools remembered, from the start: no request waits for a view's first
    catch-up, and the pools can be shown however early the store goes away."""
    door.hosts()
    door.entitlements()
    with contextlib.suppress(StoreAway):
        door.store.list_pools()
