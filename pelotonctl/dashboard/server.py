"""The dashboard's sampler and web server.

A background thread samples the sources every few seconds and keeps, in memory, each stage's lag,
held messages and throughput over time; the web server answers from the last sample only, so
a page (or many) polling every two seconds costs the broker and the store nothing more.

Routes: `/` the page (static/), `/api/state` the last sample with the history as one JSON
document, `/healthz` whether the sampler lives, `/login` and `/logout`. With a Gate (as
`pelotonctl dashboard` serves it) everything but /healthz and /login needs one of the API's
tokens, and each user sees only the jobs of the pools they may read (gate.py). The standard
library's ThreadingHTTPServer, no framework: the page is plain JS with no build step and loads nothing from the network.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Self
from urllib.parse import parse_qs

from peloton.auth.identities import Identities
from peloton.config import Settings
from peloton.store import QueryStore
from pelotonctl.dashboard.gate import Gate, session_cookie
from pelotonctl.dashboard.sources import Sources, SourceUnavailable
from pelotonctl.lag import STAGES  # in pipeline order: the page shows all four

log = logging.getLogger(__name__)

SECTIONS = ("lag", "pools", "hosts", "jobs", "pending")  # what one sample asks the sources for


class StageHistory:
    """Per stage, over time: total lag, held messages and throughput.

    Throughput is the records a stage group committed per second: the change of the sum of its
    committed offsets between two samples. Never negative: offsets that go back (the broker lost
    its log, a group was reset) start a new count instead."""

    def __init__(self, keep: int = 300):
        self.keep = keep
        self.series: dict[str, deque[dict]] = {}
        self._last: dict[str, tuple[int, int]] = {}  # stage -> (sampled_ms, committed offsets summed)

    def add(self, lag: dict) -> None:
        at = lag["sampled_ms"]
        for group in lag["groups"]:
            stage = group.get("stage") or group["group"]
            committed = sum(p["current_offset"] for p in group["partitions"]
                            if isinstance(p.get("current_offset"), int) and p["current_offset"] >= 0)
            rate = None  # unknown until there are two samples
            last = self._last.get(stage)
            if last is not None:
                if at <= last[0]:
                    continue  # the same sample again (or a clock that went back): nothing new
                rate = round(max(0, committed - last[1]) * 1000 / (at - last[0]), 3)
            self._last[stage] = (at, committed)
            self.series.setdefault(stage, deque(maxlen=self.keep)).append(
                {"t": at, "lag": group.get("total_lag") or 0, "held": group.get("held") or 0, "rate": rate})

    def to_json(self) -> dict[str, list[dict]]:
        return {stage: list(points) for stage, points in self.series.items()}


class Dashboard:
    """Samples `sources` every `sample_every_s` in a thread of its own; serves the last sample."""

    def __init__(self, sources: Sources, sample_every_s: float = 2.0, history: int = 300):
        self.sources = sources
        self.sample_every_s = sample_every_s
        self.history = StageHistory(history)
        self._data: dict = {name: None for name in SECTIONS}
        self._errors: dict[str, str] = {}
        self._sampled_ms: int | None = None
        self._took_s: float | None = None
        self._state = b""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cluster = sources.cluster() if hasattr(sources, "cluster") else {}
        self._publish()

    # -- sampling ------------------------------------------------------------------------
    def sample(self) -> None:
        """Ask every source once. A source that fails keeps its last data and says why."""
        started = time.monotonic()
        for name in SECTIONS:
            if self._stop.is_set():
                return
            try:
                value = getattr(self.sources, name)()
            except SourceUnavailable as exc:
                self._failed(name, str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - one source's bug must not take the page down
                self._failed(name, f"{type(exc).__name__}: {exc}", exc_info=True)
                continue
            if name == "lag":
                self.history.add(value)
            self._data[name] = value
            self._errors.pop(name, None)
        self._sampled_ms = int(time.time() * 1000)
        self._took_s = round(time.monotonic() - started, 3)
        self._publish()

    def _failed(self, name: str, message: str, exc_info: bool = False) -> None:
        if self._errors.get(name) != message:  # logged once per new error, not at every sample
            log.warning("dashboard: %s: %s", name, message, exc_info=exc_info)
        self._errors[name] = message

    def _publish(self) -> None:
        """Encode the state once per sample; requests only copy the bytes."""
        state = {
            "sampled_ms": self._sampled_ms, "sample_seconds": self._took_s, "every_s": self.sample_every_s,
            "stages": list(STAGES), "cluster": self._cluster, **self._data,
            "history": self.history.to_json(), "errors": dict(self._errors),
        }
        encoded = json.dumps(state, separators=(",", ":")).encode()
        with self._lock:
            self._state = encoded

    def state_json(self, keep_pool=None) -> bytes:
        """The last sample; with keep_pool(pool) -> bool, without the jobs of the other pools."""
        with self._lock:
            state = self._state
        if keep_pool is None:
            return state
        decoded = json.loads(state)
        for section in ("jobs", "pending"):
            if decoded.get(section):
                decoded[section] = [j for j in decoded[section] if keep_pool(j["pool"])]
        return json.dumps(decoded, separators=(",", ":")).encode()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample()
            self._stop.wait(max(0.0, self.sample_every_s - (time.monotonic() - started)))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dashboard-sampler", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        """Stop sampling (a sample under way finishes its current source first), close the sources."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.sources.close()


# -- the web server ------------------------------------------------------------------------
STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
          "/index.html": ("index.html", "text/html; charset=utf-8"),
          "/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/style.css": ("style.css", "text/css; charset=utf-8")}

# The page loads nothing but its own files and talks to nothing but this server.
SECURITY_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; base-uri 'none'; "
                                               "form-action 'self'; frame-ancestors 'none'",
                    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def static_file(name: str) -> bytes:
    return resources.files("pelotonctl.dashboard").joinpath("static", name).read_bytes()


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a browser's open keep-alive connection must not hold up shutdown
    dashboard: Dashboard
    gate: Gate | None = None

    def handle_error(self, request, client_address) -> None:
        # A browser that closed its tab in the middle of an answer is not worth a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # the standard library's name for it
        path = self.path.split("?", 1)[0]
        gate = self.server.gate
        if path == "/login" and gate is not None:
            self._send(HTTPStatus.OK, "text/html; charset=utf-8", static_file("login.html"))
            return
        if path == "/logout" and gate is not None:
            self._redirect("login", session_cookie("", max_age=0))
            return
        who = gate.principal(self.headers) if gate is not None and path != "/healthz" else None
        if gate is not None and path != "/healthz" and who is None:
            if path == "/api/state":
                self._send(HTTPStatus.UNAUTHORIZED, "application/json", b'{"detail": "sign in: no valid token"}')
            else:
                self._redirect("login")
            return
        if path == "/api/state":
            self._send(HTTPStatus.OK, "application/json",
                       self.server.dashboard.state_json(gate.readable(who) if who is not None else None))
        elif path == "/healthz":
            ok = self.server.dashboard.alive()
            self._send(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, "text/plain; charset=utf-8",
                       b"ok\n" if ok else b"sampler stopped\n")
        elif path in STATIC:
            name, kind = STATIC[path]
            self._send(HTTPStatus.OK, kind, static_file(name))
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")

    def do_POST(self) -> None:  # the standard library's name for it
        gate = self.server.gate
        if self.path.split("?", 1)[0] != "/login" or gate is None:
            self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")
            return
        size = min(int(self.headers.get("Content-Length") or 0), 4096)
        token = (parse_qs(self.rfile.read(size).decode("utf-8", "replace")).get("token") or [""])[0].strip()
        if gate.check(token) is None:
            page = static_file("login.html").replace(b"<!--REFUSED-->", b"That token is not valid (unknown, "
                                                     b"revoked, or mistyped).")
            self._send(HTTPStatus.UNAUTHORIZED, "text/html; charset=utf-8", page)
            return
        self._redirect("./", session_cookie(token))

    def _redirect(self, to: str, cookie: str | None = None) -> None:
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", to)
        if cookie is not None:
            self.send_header("Set-Cookie", cookie)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send(self, status: HTTPStatus, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for header, value in SECURITY_HEADERS.items():
            self.send_header(header, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # the standard library's signature
        log.debug("%s %s", self.address_string(), format % args)


@dataclass
class Running:
    """A dashboard being served: its address, and how to wait for it and stop it."""

    dashboard: Dashboard
    httpd: _Server
    thread: threading.Thread

    @property
    def host(self) -> str:
        return self.httpd.server_address[0]

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def wait(self) -> None:
        """Until the server stops (close() from another thread) or Ctrl-C."""
        while self.thread.is_alive():
            self.thread.join(0.5)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
        self.dashboard.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def start(dashboard: Dashboard, port: int = 8080, host: str = "127.0.0.1", gate: Gate | None = None) -> Running:
    """Serve `dashboard` on host:port (port 0: any free port) and start its sampler; behind `gate`'s
    tokens when one is given."""
    # Bound first: a port in use fails before the sampler starts.
    httpd = (_Server6 if ":" in host else _Server)((host, port), _Handler)
    httpd.dashboard = dashboard
    httpd.gate = gate
    dashboard.start()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                              name="dashboard-http", daemon=True)
    thread.start()
    return Running(dashboard, httpd, thread)


def serve(settings: Settings, store: QueryStore, port: int = 8080, host: str = "127.0.0.1",
          sample_every_s: float = 2.0, history: int = 300) -> Running:
    """The dashboard of the cluster `settings` name, served on host:port (see `start`).
    `history` samples are kept: 300 at every 2 s shows the last ten minutes."""
    gate = Gate(Identities.from_settings(settings, store), store, settings.admin_group_set())
    return start(Dashboard(Sources(settings, store), sample_every_s, history), port, host, gate)
