"""An agent serves a run's output files only against a grant for that run: the API, having
checked that its caller may read the job, signs a short-lived grant for the run and its host
(peloton/auth/grants.py), and the agent checks it with the API's public key
(PELOTON_AGENT_LOGS_PUBLIC_KEY). A grant for one run opens no other, and nothing an agent holds can
make one. Read-only, a byte range at a time, only a run's stdout and stderr (no path a request
can steer elsewhere).

    GET /v1/sandboxes/<task id>/<stdout|stderr>?offset=N&limit=M   Authorization: Bearer <grant>
        -> the bytes, X-File-Size: total

It also tells its peers and the host managers where its lease stands (no grant needed: it says
only whether its reports reach the brokers, and how long its runs may go on):

    GET /v1/lease  -> {"reaching": bool, "holds_runs_s": float, "hosts": N}
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from peloton.auth.grants import GrantError, check
from peloton.host.lease_answer import LEASE_PATH
from peloton.host.sandboxes import sandbox_path

log = logging.getLogger("peloton.agent")

FILES = ("stdout", "stderr")
MAX_CHUNK = 4 * 1024 * 1024  # per request: a client pages through a large file


class LogServer:
    def __init__(self, sandbox_root: Path, verify_key: Ed25519PublicKey | None, hosts: set[str] | frozenset[str],
                 host: str = "127.0.0.1", port: int = 0, keep_s: float = 0.0,
                 lease_answer: Callable[[], dict] | None = None) -> None:
        self.sandbox_root, self.verify_key, self.hosts = sandbox_root, verify_key, frozenset(hosts)
        self.lease_answer = lease_answer
        # Why a file may be missing, said with each 404: the agent removes sandboxes keep_s after
        # their run ended (LocalDriver's collect_sandboxes).
        self.missing_hint = (f" (sandboxes are removed {keep_s / 86400:g} days after their run ended: "
                             f"PELOTON_SANDBOX_KEEP_S)" if keep_s > 0 else "")
        handler = type("Handler", (_Handler,), {"server_logs": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        advertised = socket.getfqdn() if host in ("0.0.0.0", "") else host
        self.url = f"http://{advertised}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="agent-logs", daemon=True)

    def start(self) -> LogServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def read(self, task_id: str, name: str, offset: int, limit: int) -> tuple[bytes, int]:
        """(the bytes, the file's size); FileNotFoundError for a run or file not here."""
        path = sandbox_path(self.sandbox_root, task_id) / name  # ValueError for a name no sandbox has
        # Not through a link: a task may replace its stdout with one to a file only the agent reads.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
            size = f.seek(0, 2)
            f.seek(min(max(offset, 0), size))
            return f.read(min(max(limit, 0), MAX_CHUNK)), size


class _Handler(BaseHTTPRequestHandler):
    server_logs: LogServer

    def do_GET(self) -> None:  # the standard library's name for it
        logs = self.server_logs
        url = urlsplit(self.path)
        if url.path == LEASE_PATH and logs.lease_answer is not None:
            self._answer(HTTPStatus.OK, json.dumps(logs.lease_answer()).encode(), {"Content-Type": "application/json"})
            return
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[:2] != ["v1", "sandboxes"] or parts[3] not in FILES:
            self._answer(HTTPStatus.NOT_FOUND, b"GET /v1/sandboxes/<task id>/<stdout|stderr>\n")
            return
        if logs.verify_key is None:
            self._answer(HTTPStatus.SERVICE_UNAVAILABLE, b"this agent serves no run output: it was started without "
                         b"PELOTON_AGENT_LOGS_PUBLIC_KEY, the key that checks the API's grants\n")
            return
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        try:
            if scheme != "Bearer" or not token:
                raise GrantError("no grant: the API gives one to a caller who may read the job")
            check(logs.verify_key, token.strip(), parts[2], logs.hosts)
        except GrantError as exc:
            self._answer(HTTPStatus.FORBIDDEN if token else HTTPStatus.UNAUTHORIZED,
                         f"the agent serves run {parts[2]}'s output only with the API's grant for it: {exc}\n".encode())
            return
        query = parse_qs(url.query)
        try:
            offset = int((query.get("offset") or ["0"])[0])
            limit = int((query.get("limit") or [str(MAX_CHUNK)])[0])
            data, size = logs.read(parts[2], parts[3], offset, limit)
        except ValueError:
            self._answer(HTTPStatus.BAD_REQUEST, b"offset and limit are whole numbers; a task id is a run's id\n")
            return
        except OSError:
            self._answer(HTTPStatus.NOT_FOUND,
                         f"no {parts[3]} of run {parts[2]} on this host{logs.missing_hint}\n".encode())
            return
        self._answer(HTTPStatus.OK, data, {"X-File-Size": str(size)})

    def _answer(self, status: HTTPStatus, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        headers = dict(headers or {})
        self.send_header("Content-Type", headers.pop("Content-Type", "application/octet-stream"
                                                     if status == HTTPStatus.OK else "text/plain"))
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        try:
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the asker gave up (a peer's short timeout while this agent was slow): nothing to say

    def log_message(self, fmt: str, *args: object) -> None:  # requests are the API's; not worth a line each
        pass
