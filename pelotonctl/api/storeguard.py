"""The API's way to its store: every call bounded in time, so a store that is away (stopped, or
hung: its kernel accepts connections and queries and nothing answers, as with a stalled disk)
never holds a request past a few seconds, and an answer that needs it says so in one line.

A call runs in a worker thread and is waited for STORE_DEADLINE_S at most; one that does not
answer in time, or fails as a store that is away fails (store_unavailable), marks the store away.
While it is away, calls fail at once (nothing more piles up behind a hung server) and one probe at
a time asks it again every PROBE_S; the first answer marks it back. A transaction runs all its
calls in one worker of its own, since the backends keep a transaction's connection per thread.

A few reads are remembered as last answered (a token's row, the pool tree): while the store is
away they are answered from memory, and the request is marked as served without the store, so
reads the API can serve from the compacted views it holds (hosts, pools, lag) still answer and
say so. Everything else raises StoreAway: a 503 whose one line names the store, why, and what
needed it."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request, Response

from peloton.store import store_unavailable
from pelotonctl.api.refusals import Refused

log = logging.getLogger("pelotonctl.api")

# How long a request waits for one store call (PELOTON_API_STORE_TIMEOUT_S, when settings have it).
STORE_DEADLINE_S = 5.0
# How often a store that is away is asked again, one probe at a time.
PROBE_S = 1.0
# A token's row is trusted from memory while the store is away, up to this long after the store last
# confirmed it: a token revoked meanwhile through another API instance cannot be known until then.
REMEMBERED_S = 3600.0
# Calls at once; more wait their turn (within their deadline).
WORKERS = 16
# The reads answered from memory while the store is away, and how many arguments' answers each keeps.
REMEMBERED = {"get_token": 10_000, "get_pool": 10_000, "list_pools": 1}
# The headers of an answer served without the store: where it came from, and why.
SERVED_FROM, STORE_AWAY = "X-Peloton-Served-From", "X-Peloton-Store"

# What each endpoint is called in a StoreAway line ("job status needs it"); others by their name.
ENDPOINTS = {"create_job": "job create", "query_jobs": "job query", "get_job": "job get", "job_status": "job status",
             "stop_job": "job stop", "start_job": "job start", "restart_job": "job restart",
             "update_job": "job update", "delete_job": "job delete", "command_status": "a command's outcome",
             "list_tasks": "task list", "get_task": "task get", "task_events": "task events", "task_logs": "task logs",
             "list_hosts": "host list", "maintenance": "host maintenance", "list_pools": "respool dump",
             "get_pool": "respool get", "create_pool": "respool create", "update_pool": "respool update",
             "delete_pool": "respool delete", "resmgr_tasks": "resmgr tasks", "resmgr_pending": "resmgr pending",
             "list_volumes": "volume list", "get_volume": "volume get", "delete_volume": "volume delete"}


class StoreAway(Refused):
    """The store did not answer (in time, or at all): a 503 with one line naming it."""

    def __init__(self, line: str, needs: str | None) -> None:
        super().__init__(503, f"{line}: {needs or 'this answer'} needs it")
        self.line = line


def describe_store(url: str) -> str:
    """The store a URL names, in a few words and without its password: 'PostgreSQL at host:5432'."""
    for schemes, kind, port in ((("postgresql://", "postgres://"), "PostgreSQL", 5432),
                                (("cassandra://",), "Cassandra", 9042)):
        if url.startswith(schemes):
            parts = urllib.parse.urlsplit(url)
            hosts = parts.netloc.rpartition("@")[2]
            if kind == "PostgreSQL" and ":" not in hosts.rpartition("]")[2]:
                hosts = f"{hosts or 'localhost'}:{port}"
            return f"{kind} at {hosts}"
    path = url[len("sqlite:///") - 1:] if url.startswith("sqlite:///") else url
    return f"SQLite at {path}"


def reason_of(exc: BaseException, deadline_s: float) -> str:
    """Why a call failed, in the words after 'the store (...)': 'did not answer within 5 s'."""
    if isinstance(exc, (TimeoutError, FutureTimeout)):
        return f"did not answer within {deadline_s:g} s"
    if type(exc).__name__ == "PoolTimeout":  # psycopg_pool: no connection could be had in time
        return f"gave no connection within {deadline_s:g} s"
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    # psycopg's 'connection failed: connection to server at "h", port 5432 failed: Connection refused'
    # names the server the line names already: its last part says why.
    why = first.rsplit(" failed: ", 1)[-1].strip() or type(exc).__name__
    return f"is unavailable ({why[0].lower()}{why[1:]})"


@dataclass
class Answer:
    """What one request's store calls say about its answer: what the request is called, and the
    response whose headers say it was served without the store."""

    needs: str | None = None
    response: Response | None = None
    without_store: list[str] = field(default_factory=list)

    def served_from_views(self, why: str) -> None:
        if why not in self.without_store:
            self.without_store.append(why)
        if self.response is not None:
            self.response.headers[SERVED_FROM] = "views"
            self.response.headers[STORE_AWAY] = why.encode("ascii", "replace").decode()  # a header is latin-1


# This request's Answer: set by `answering` in the request's context, read by the guard in the
# worker thread that runs the route (which copies that context).
ANSWER: contextvars.ContextVar[Answer | None] = contextvars.ContextVar("peloton_api_answer", default=None)


def current_answer() -> Answer:
    """This request's Answer (a throwaway one outside a request)."""
    return ANSWER.get() or Answer()


async def answering(request: Request, response: Response) -> None:
    """A router's dependency: names the request for StoreAway lines and lets an answer served
    without the store say so. Async: set in the request's own context, which its worker thread
    copies."""
    endpoint = request.scope.get("endpoint")
    name = getattr(endpoint, "__name__", "")
    ANSWER.set(Answer(ENDPOINTS.get(name, name.replace("_", " ") or None), response))


@dataclass(frozen=True)
class Away:
    since: float  # wall clock
    reason: str


class StoreGuard:
    """The store's calls, each bounded; whether the store is away, and since when."""

    def __init__(self, store: Any, where: str, deadline_s: float = STORE_DEADLINE_S, probe_s: float = PROBE_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.store, self.where, self.deadline_s, self.probe_s, self.clock = store, where, deadline_s, probe_s, clock
        self._pool: ThreadPoolExecutor | None = None  # made on first use, again after close()
        self._lock = threading.Lock()
        self._away: Away | None = None
        self._prober: tuple[threading.Thread, threading.Event] | None = None  # the probe, and its stop
        self._memory: dict[str, dict[tuple, tuple[float, Any]]] = {name: {} for name in REMEMBERED}
        self._local = threading.local()  # the worker of the transaction this thread is in

    def _workers(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="store")
            return self._pool

    # -- whether it is away --------------------------------------------------------------------
    @property
    def away(self) -> Away | None:
        return self._away

    def line(self) -> str:
        """What is wrong with the store now, in one line naming it: why it went away, and since
        when once that is a while ago."""
        away = self._away
        if away is None:
            return f"the store ({self.where}) is answering"
        if self.clock() - away.since < 1.0:
            return f"the store ({self.where}) {away.reason}"
        since = time.strftime("%H:%M:%S", time.localtime(away.since))
        return f"the store ({self.where}) has not answered since {since} ({away.reason})"

    def _went_away(self, reason: str) -> None:
        """The store marked away (since the first time), with a probe asking it again; a call after
        close() is the guard in use again, and starts one too."""
        with self._lock:
            if self._away is None:
                self._away = Away(self.clock(), reason)
                log.warning("the store (%s) %s: answers that need it are 503 until it answers again", self.where,
                            reason)
            if self._prober is None or not self._prober[0].is_alive() or self._prober[1].is_set():
                stop = threading.Event()
                self._prober = (threading.Thread(target=self._probe, args=(stop,), name="store-probe", daemon=True),
                                stop)
                self._prober[0].start()

    def _back(self) -> None:
        with self._lock:
            away, self._away = self._away, None
        if away is not None:
            log.warning("the store (%s) answers again after %.0f s away", self.where, self.clock() - away.since)

    def _probe(self, stop: threading.Event) -> None:
        """Asks the store again every probe_s, one question at a time (one left hanging by a hung
        server is waited for, not joined by another), until it answers or close() stops it."""
        asked: Future | None = None
        while not stop.wait(self.probe_s) and self._away is not None:
            try:
                if asked is None or asked.done():
                    asked = self._workers().submit(self.store.list_pools)
                pools = asked.result(timeout=self.deadline_s)
            except FutureTimeout:
                continue
            except Exception:  # still away (or the guard closed): asked again after probe_s
                asked = None
                continue
            self._remember("list_pools", (), pools)
            self._back()
            return

    # -- calls ---------------------------------------------------------------------------------
    def call(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) within the deadline; StoreAway (or a remembered answer) otherwise."""
        worker = getattr(self._local, "worker", None)
        away = self._away
        if away is not None and worker is None:
            self._went_away(away.reason)  # its probe again, if a close() ended the last one
            return self._without_store(name, args)
        future = (worker or self._workers()).submit(fn, *args, **kwargs)
        try:
            value = future.result(timeout=self.deadline_s)
        except FutureTimeout:
            # Not started yet: it never will (a write the caller was told failed must not happen
            # later). Started: a hung server finishes it, or drops it, when it can.
            future.cancel()
            self._went_away(reason_of(TimeoutError(), self.deadline_s))
            return self._without_store(name, args, in_transaction=worker is not None)
        except store_unavailable() as exc:
            self._went_away(reason_of(exc, self.deadline_s))
            return self._without_store(name, args, in_transaction=worker is not None)
        if name in REMEMBERED and not kwargs:
            self._remember(name, args, value)
        elif name == "revoke_token" and args:  # never served from memory again
            with self._lock:
                self._memory["get_token"].pop(args[:1], None)
        return value

    def _without_store(self, name: str, args: tuple, in_transaction: bool = False) -> Any:
        """The remembered answer of a read the API can serve while the store is away (the request
        marked as such); StoreAway for anything else."""
        line = self.line()
        remembered = None if in_transaction else self._memory.get(name, {}).get(args)
        if remembered is not None and (name != "get_token" or self.clock() - remembered[0] <= REMEMBERED_S):
            current_answer().served_from_views(line)
            return remembered[1]
        raise StoreAway(line, current_answer().needs)

    def _remember(self, name: str, args: tuple, value: Any) -> None:
        with self._lock:
            memory = self._memory[name]
            if value is None:  # nothing to serve later (and unknown ids would fill memory)
                memory.pop(args, None)
                return
            if args not in memory and len(memory) >= REMEMBERED[name]:
                memory.pop(next(iter(memory)))  # the oldest remembered first
            memory[args] = (self.clock(), value)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """The store's transaction, entered, run and ended in one worker of its own; every call of
        this thread inside it goes to that worker. Nested ones join it, as the backends' do."""
        outer = getattr(self._local, "worker", None) is None
        if outer and self._away is not None:
            self._without_store("transaction", ())  # raises: nothing is begun on a store that is away
        worker = ThreadPoolExecutor(1, thread_name_prefix="store-tx") if outer else self._local.worker
        self._local.worker = worker
        try:
            tx = self.call("transaction", self.store.transaction)
            entered: Future = worker.submit(tx.__enter__)
            try:
                conn = entered.result(timeout=self.deadline_s)
            except FutureTimeout:
                away = StoreAway(f"the store ({self.where}) did not begin a transaction", None)
                worker.submit(tx.__exit__, StoreAway, away, None)  # ends it once the server answers
                self._went_away(reason_of(TimeoutError(), self.deadline_s))
                raise StoreAway(self.line(), current_answer().needs) from None
            except store_unavailable() as exc:
                self._went_away(reason_of(exc, self.deadline_s))
                raise StoreAway(self.line(), current_answer().needs) from None
            try:
                yield conn
            except BaseException as exc:
                ended = worker.submit(tx.__exit__, type(exc), exc, exc.__traceback__)
                with contextlib.suppress(Exception):  # what went wrong inside is what the caller hears
                    ended.result(timeout=self.deadline_s)
                raise
            self.call("commit", tx.__exit__, None, None, None)
        finally:
            if outer:
                self._local.worker = None
                worker.shutdown(wait=False)

    def close(self) -> None:
        """Ends the probe and the workers (calls hung on a stopped server are left to it); a call
        after this starts them again (an app's lifespan may run more than once)."""
        with self._lock:
            if self._prober is not None:
                self._prober[1].set()
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class GuardedStore:
    """The store as routes use it: its methods, each through the guard; anything else as it is."""

    def __init__(self, guard: StoreGuard) -> None:
        self._guard = guard

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._guard.store, name)
        if not callable(attr):
            return attr
        return lambda *args, **kwargs: self._guard.call(name, attr, *args, **kwargs)

    def transaction(self) -> contextlib.AbstractContextManager:
        return self._guard.transaction()
