"""The gRPC port over a seeded SQLite store: pools /a (team-a's) and /b (team-b's), job j1 in /a,
tokens of alice (team-a), bob (team-b) and root (admin); commands and audit records are recorded
rather than sent (no broker), and the job manager's answer is not awaited."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from peloton.auth.tokens import issue
from peloton.config import Settings
from peloton.model.jobconfig import parse_job_config
from peloton.model.pool import parse_pool_config
from peloton.runtime import RecordingEmitter, StaticView
from peloton.store import open_store
from pelotonctl.api.app import make_app
from pelotonctl.api.audit import Audit
from pelotonctl.api.rpc.server import build
from stages.admit.expand import expand_job
from tests.builders.api import HOST, JOB, RESOURCES


@dataclass
class Port:
    channel: grpc.Channel
    store: Any
    out: RecordingEmitter
    trail: RecordingEmitter
    door: Any
    tokens: dict[str, str] = field(default_factory=dict)

    def as_user(self, user: str) -> list[tuple[str, str]]:
        """Metadata of a call from `user`, with Peloton's YARPC headers beside the token."""
        return [("authorization", f"Bearer {self.tokens[user]}"), ("rpc-caller", "test"), ("rpc-encoding", "proto")]

    def decisions(self) -> list[tuple[str, str, str, bool]]:
        return [(v["user"], v["action"], v["object"], v["allowed"]) for _t, _k, _s, v in self.trail.take("audit")]


@pytest.fixture
def port(tmp_path):
    store = open_store(tmp_path / "peloton.db")
    store.put_pool("/a", parse_pool_config("name: a\nowningTeam: team-a\n" + RESOURCES, "/a"))
    store.put_pool("/b", parse_pool_config("name: b\nowningTeam: team-b\n" + RESOURCES, "/b"))
    job, tasks = expand_job("j1", "/a", parse_job_config(JOB), JOB, 1)
    store.create_jobs([job], tasks)
    tokens = {}
    for user, group, admin in (("alice", "team-a", False), ("bob", "team-b", False), ("root", "ops", True)):
        tokens[user], row = issue(user, [group], admin, now_ms=1)
        store.add_token(row)
    out, trail = RecordingEmitter("api"), RecordingEmitter("api")
    settings = Settings(home=tmp_path, store=str(tmp_path / "peloton.db"), command_wait_s=0.05)
    app = make_app(settings, store, out, Audit(trail, 1.0), StaticView({"h0": HOST}))
    app.state.door.use_view("entitlements", StaticView({}))  # no broker: entitle has published nothing
    server, bound = build(app.state.door, settings, "127.0.0.1", 0)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{bound}")
    try:
        yield Port(channel, store, out, trail, app.state.door, tokens)
    finally:
        channel.close()
        server.stop(0).wait()
        app.state.door.close()
        store.close()
