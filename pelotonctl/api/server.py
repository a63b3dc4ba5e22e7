"""One API instance: the store, one producer for commands and one for the audit trail, served
by uvicorn until SIGTERM or Ctrl-C. Start as many as wanted; they share nothing but the store and
the broker."""

from __future__ import annotations

from peloton.config import Settings
from peloton.store import open_store
from pelotonctl import admin
from pelotonctl.api.app import make_app
from pelotonctl.api.audit import Audit


def serve(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    if settings.signed_commands and not settings.command_token:
        raise SystemExit("job commands must be signed here (PELOTON_SIGNED_COMMANDS) and this API has no token to "
                         "sign them with: set PELOTON_COMMAND_TOKEN to an admin token (`pelotonctl auth issue "
                         "--user api --admin`)")
    store = open_store(settings.store)
    audit = Audit(admin.emitter(settings, who="api"), settings.flush_timeout_s)
    app = make_app(settings, store, admin.emitter(settings, who="api"), audit)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        store.close()
