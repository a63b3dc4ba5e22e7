"""The door every request goes through: who asks, whether they may (each decision audited), the
job they name, and the one producer and one view of the hosts that all requests share. make_app
keeps one Door in app.state; routes take it with `door: DoorDep`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials

from peloton.auth.identities import Identities
from peloton.auth.permissions import PoolsAbove, decide
from peloton.auth.tokens import Principal
from peloton.config import Settings
from peloton.runtime import CompactedView, Emitter, StaticView
from peloton.store.base import JobRow, StorageGateway
from pelotonctl.api.audit import Audit
from pelotonctl.api.identity import Unauthenticated, principal_of

# ?wait=true on a job command: answer once the job manager acted on it, or refused it (400).
Wait = Annotated[bool, Query(description="Answer once the job manager has acted on the command (up to 30 s); "
                                         "400 with its reason if it refused")]


class Refused(Exception):
    """An answer other than 200: the status and the reason the caller reads."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Door:
    """What every request needs: who asks, whether they may, and one producer and one view of the
    hosts shared by all requests (making either costs about a second)."""

    def __init__(self, settings: Settings, store: StorageGateway, out: Emitter, audit: Audit,
                 hosts_view: CompactedView | StaticView | None = None) -> None:
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

    def send(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """An admin call that produces, through the shared producer, one at a time."""
        with self._send:
            return fn(*args, out=self.out, **kwargs)

    def job(self, job_id: str) -> JobRow:
        job = self.store.get_job(job_id)
        if job is None:
            raise Refused(404, f"no job {job_id}")
        return job

    def readable_job(self, job_id: str, creds: HTTPAuthorizationCredentials | None) -> JobRow:
        """The job, once the caller is known (401) and may read it (403); 404 if there is none."""
        who = self.who(creds, "job.read", job_id)
        job = self.job(job_id)
        self.allow(who, "job.read", job_id, job.pool)
        return job

    def settle(self, answer: dict) -> None:
        """Wait until the job manager has handled the command: its outcome goes into `answer`; a
        refusal is a 400 with the job manager's reason (nothing was done)."""
        deadline = time.monotonic() + self.settings.command_wait_s
        while (outcome := self.store.command_outcome(answer["command_id"])) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        answer["outcome"] = outcome["state"] if outcome else "pending"  # pending: the job manager is behind
        if outcome and outcome["state"] == "refused":
            raise Refused(400, f"refused by the job manager: {outcome['reason']}")

    def close(self) -> None:
        with self._hosts_lock:
            if self._hosts is not None:
                self._hosts.close()
                self._hosts = None


async def door_of(request: Request) -> Door:
    # async: read on the event loop, without a worker thread of its own
    return request.app.state.door


# The app's Door, as a route parameter.
DoorDep = Annotated[Door, Depends(door_of)]
