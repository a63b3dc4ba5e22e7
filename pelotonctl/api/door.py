"""The door every request goes through: who asks, whether they may (each decision audited), the
job they name, and what all requests share: one producer, the compacted views of the hosts and the
pools' entitlements, and the store behind its guard (storeguard.py: every call bounded in time).
make_app keeps one Door in app.state; routes take it with `door: DoorDep`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, cast

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials

from peloton.auth.identities import Identities
from peloton.auth.permissions import PoolsAbove, decide
from peloton.auth.tokens import Principal
from peloton.config import Settings
from peloton.model.lockdown import LockdownReads, component_of_action, locked_out
from peloton.runtime import CompactedView, Emitter, StaticView
from peloton.store.base import JobRow, StorageGateway
from pelotonctl.api.audit import Audit
from pelotonctl.api.identity import Unauthenticated, principal_of
from pelotonctl.api.refusals import Refused
from pelotonctl.api.storeguard import GuardedStore, StoreAway, StoreGuard, describe_store

# ?wait=true on a job command: answer once the job manager acted on it, or refused it (400).
Wait = Annotated[bool, Query(description="Answer once the job manager has acted on the command (up to 30 s); "
                                         "400 with its reason if it refused")]


class Door:
    """What every request needs: who asks, whether they may, and one producer and the views shared
    by all requests (making either costs about a second)."""

    def __init__(self, settings: Settings, store: StorageGateway, out: Emitter, audit: Audit,
                 hosts_view: CompactedView | StaticView | None = None,
                 entitlements_view: CompactedView | StaticView | None = None) -> None:
        self.settings, self.out, self.audit = settings, out, audit
        self.guard = StoreGuard(store, describe_store(str(settings.store)))
        # Every route reaches the store through the guard: its calls bounded, its absence said.
        self.store = cast(StorageGateway, GuardedStore(self.guard))
        self.admin_groups = settings.admin_group_set()
        self._send = threading.Lock()
        self._views_lock = threading.Lock()
        # Each made on first use: a CompactedView (a StaticView in tests).
        self._views: dict[str, CompactedView | StaticView | None] = {"host-state": hosts_view,
                                                                       "entitlements": entitlements_view}
        self._closers: list[Callable[[], None]] = []
        self.identities = Identities.from_settings(settings, self.store)
        # With the store away the last lockdown read holds: what needs the store fails on its own,
        # and the job manager keeps the lockdown of the commands sent meanwhile.
        self._lockdown = LockdownReads(lambda: self.store.lockdown(), kept_on=(StoreAway,))

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
        component = component_of_action(action)  # pools, hosts, tokens: never locked, the store not asked
        locked = locked_out(component, self.locks()) if component else None
        if locked:  # permitted, but the cluster is frozen for it now
            self.audit.record(principal, action, obj, pool, False, locked)
            raise Refused(423, f"{action} on {obj} refused: {locked}")

    def locks(self, fresh: bool = False) -> dict[str, dict]:
        """The cluster's lockdown, read from the store at most once a second (every request asks)."""
        return self._lockdown.current(fresh)

    def hosts(self) -> list[dict]:
        """Every host-state record, from a view kept up to date across requests."""
        return list(self._view("host-state").values())

    def entitlements(self) -> dict[str, dict]:
        """What entitle last published of each pool (its PoolEntitlement), by pool path."""
        return self._view("entitlements")

    def _view(self, topic: str) -> dict[str, dict]:
        with self._views_lock:
            view = self._views[topic]
            if view is None:
                view = self._views[topic] = CompactedView(self.settings, topic, quiet=True)
                view.catch_up(timeout=3.0)
            else:
                view.poll(0.0)
            return dict(view.values)

    def use_view(self, topic: str, view: CompactedView | StaticView) -> None:
        """A view of `topic` given rather than made on first use (a StaticView in tests)."""
        with self._views_lock:
            self._views[topic] = view

    def on_close(self, fn: Callable[[], None]) -> None:
        """fn is called when the API stops (something a route keeps across requests)."""
        self._closers.append(fn)

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
        for fn in self._closers:
            fn()
        self.guard.close()
        with self._views_lock:
            for topic, view in self._views.items():
                if view is not None:
                    view.close()
                    self._views[topic] = None


async def door_of(request: Request) -> Door:
    # async: read on the event loop, without a worker thread of its own
    return request.app.state.door


# The app's Door, as a route parameter.
DoorDep = Annotated[Door, Depends(door_of)]
