"""Health checks of the runs a driver started (peloton/model/health.py says what a check is).

The driver's thread calls step() on every poll; a check itself runs on a small pool of threads,
since a command may take up to its timeout and an HTTP answer too, and the driver must never block
on a task. Each run has at most one check in flight; the driver's thread alone reads the results,
so nothing here needs a lock.

What step() returns is the news: a run's health changed (HEALTH_UNKNOWN -> HEALTHY, HEALTHY ->
UNHEALTHY, ...), and whether the run must be killed for it (maxConsecutiveFailures in a row)."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from peloton.model.health import COMMAND, HEALTH_UNKNOWN, HEALTHY, UNHEALTHY, HealthCheck

_OUTPUT_TAIL = 200  # characters of a failed command check's output kept in its message
_WORKERS = 4


@dataclass(frozen=True, slots=True)
class HealthNews:
    task_id: str
    health: str  # HEALTHY or UNHEALTHY
    message: str
    kill: bool = False  # failed maxConsecutiveFailures in a row: the run must go


@dataclass(slots=True, eq=False)
class _Watched:
    check: HealthCheck
    sandbox: Path
    env: Mapping[str, str]
    as_user: dict
    next_at: float
    health: str = HEALTH_UNKNOWN
    failures: int = 0
    running: Future | None = None
    gave_up: bool = False  # reported for killing: no more checks


class HealthChecks:
    def __init__(self, workers: int = _WORKERS):
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None  # made at the first check: most drivers never need it
        self._watched: dict[str, _Watched] = {}

    def watch(self, task_id: str, check: HealthCheck, sandbox: Path, env: Mapping[str, str], now: float,
              as_user: dict | None = None) -> None:
        """Check the run from `now` + initialIntervalSecs on, every intervalSecs."""
        self._watched[task_id] = _Watched(check, sandbox, dict(env), as_user or {}, now + check.initial_interval_s)

    def forget(self, task_id: str) -> None:
        """The run ended: its checks stop (one in flight finishes unread)."""
        self._watched.pop(task_id, None)

    def step(self, now: float) -> list[HealthNews]:
        news = []
        for task_id, w in self._watched.items():
            if w.gave_up:
                continue
            if w.running is not None:
                if not w.running.done():
                    continue
                ok, detail = w.running.result()
                w.running = None
                w.next_at = now + w.check.interval_s
                news.extend(self._judge(task_id, w, ok, detail))
            if w.running is None and not w.gave_up and now >= w.next_at:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="health-check")
                w.running = self._pool.submit(run_check, w.check, w.sandbox, w.env, w.as_user)
        return news

    @staticmethod
    def _judge(task_id: str, w: _Watched, ok: bool, detail: str) -> list[HealthNews]:
        if ok:
            w.failures = 0
            if w.health != HEALTHY:
                w.health = HEALTHY
                return [HealthNews(task_id, HEALTHY, f"health check passed: {detail}")]
            return []
        w.failures += 1
        if w.failures < w.check.max_consecutive_failures:
            return []
        w.health, w.gave_up = UNHEALTHY, True
        return [HealthNews(task_id, UNHEALTHY, f"health check failed {w.failures} time{'s' if w.failures > 1 else ''} "
                                               f"in a row: {detail}", kill=True)]

    def close(self) -> None:
        self._watched.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def run_check(check: HealthCheck, sandbox: Path, env: Mapping[str, str], as_user: dict) -> tuple[bool, str]:
    """One check, on a worker thread: (healthy, what it saw). Never raises."""
    try:
        if check.type == COMMAND:
            return _command_check(check, sandbox, env, as_user)
        return _http_check(check)
    except Exception as exc:  # a check that cannot even run is a failed check, not a dead driver
        return False, f"the check could not run: {exc}"


def _command_check(check: HealthCheck, sandbox: Path, env: Mapping[str, str], as_user: dict) -> tuple[bool, str]:
    # Its own process group, so a timeout stops whatever the command started too.
    proc = subprocess.Popen(["/bin/sh", "-c", check.command], cwd=sandbox, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, **as_user)
    try:
        out, _ = proc.communicate(timeout=check.timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return False, f"command timed out after {check.timeout_s:g}s"
    if proc.returncode == 0:
        return True, "command exited 0"
    tail = out.decode(errors="replace").strip()[-_OUTPUT_TAIL:]
    return False, f"command exited with code {proc.returncode}" + (f": {tail}" if tail else "")


def _http_check(check: HealthCheck) -> tuple[bool, str]:
    url = f"{check.http_scheme}://127.0.0.1:{check.http_port}{check.http_path}"
    # The task's own certificate is not ours to judge: HTTPS checks do not verify it (as Marathon's).
    context = ssl._create_unverified_context() if check.http_scheme == "https" else None
    try:
        with urllib.request.urlopen(url, timeout=check.timeout_s, context=context) as answer:
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        return False, f"GET {url}: {getattr(exc, 'reason', exc)}"
    if 200 <= status < 400:
        return True, f"GET {url}: {status}"
    return False, f"GET {url}: {status}"
