"""A store whose server can be made to hang or go away, for the API's tests of answers with the
store away, and the API over it seeded with one pool, one job and alice's token."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from fastapi import FastAPI

from peloton.config import Settings
from peloton.runtime import RecordingEmitter, StaticView
from pelotonctl.api.app import make_app
from pelotonctl.api.audit import Audit
from tests.builders.api import HOST, seeded_store


class Switch:
    """The store, or a store whose server hangs (hung: every call waits until released) or is gone
    (stopped: every call fails as a store whose files are gone)."""

    def __init__(self, store) -> None:
        self.store, self.hung, self.stopped = store, False, False
        self.released = threading.Event()

    def __getattr__(self, name: str):
        attr = getattr(self.store, name)
        if not callable(attr) or name == "transaction":
            return attr

        def call(*args, **kwargs):
            if self.hung:
                self.released.wait(30)
            if self.stopped:
                raise sqlite3.OperationalError("unable to open database file")
            return attr(*args, **kwargs)
        return call


def api_over_switch(tmp_path: Path, silent: dict) -> tuple[FastAPI, Switch, str]:
    """The API over a Switch of a SQLite store holding pool /a (team-a's), job j1 in it and alice's
    token; its hosts view holds h0 (UP) and `silent`. (app, switch, alice's token)."""
    store, token = seeded_store(tmp_path / "peloton.db", "alice", ["team-a"])
    switch = Switch(store)
    settings = Settings(home=tmp_path, store=str(tmp_path / "peloton.db"), command_wait_s=0.05)
    app = make_app(settings, switch, RecordingEmitter("api"), Audit(RecordingEmitter("api"), 1.0),
                   StaticView({"h0": HOST, "h1": silent}))
    app.state.door.use_view("entitlements", StaticView())
    return app, switch, token
