"""Host pools as operators manage them (Peloton's `hostmgr hostpool list|list-hosts|create|delete|
change`): the pools live in the store, each host's pool on the host-state topic (the `host_pool`
label its host manager gives it), and a move travels to that host manager on the placements topic
(HostPoolChange), which drains the host first when runs are on it (stages/launch)."""

from __future__ import annotations

import os
import uuid

from peloton.config import Settings
from peloton.model.host_pools import (
    DEFAULT_POOL,
    POOL_LABEL,
    change_problem,
    delete_problem,
    name_problem,
    pools_with_hosts,
)
from peloton.runtime import now_ms
from peloton.store import QueryStore
from pelotonctl import admin
from pelotonctl.admin import AlreadyExists, NotFound, UserError, pool_tree_lock


def current_pools(hosts: list[dict]) -> dict[str, str]:
    """host id -> the host pool its host manager last said it is in."""
    return {h["host_id"]: h["labels"].get(POOL_LABEL, DEFAULT_POOL) for h in hosts}


def host_pool_rows(store: QueryStore, hosts: list[dict]) -> list[dict]:
    """Every host pool with its hosts, and the hosts on their way in (draining before a move)."""
    made = store.host_pools()
    moving = {h: desired for h, (pool, desired) in store.host_pool_members().items() if pool != desired}
    return [{"name": name, "hosts": members, "moving_in": sorted(h for h, d in moving.items() if d == name),
             "created_ms": made.get(name, {}).get("created_ms"), "created_by": made.get(name, {}).get("created_by", "")}
            for name, members in pools_with_hosts(made, current_pools(hosts)).items()]


def list_host_pools(settings: Settings, store: QueryStore) -> list[dict]:
    return host_pool_rows(store, admin.list_hosts(settings))


def create_host_pool(settings: Settings, store: QueryStore, name: str, who: str = "") -> dict:
    problem = name_problem(name)
    if problem:
        raise UserError(problem)
    if name == DEFAULT_POOL:
        raise AlreadyExists(f"host pool {name!r} exists: every host starts in it")
    with pool_tree_lock(settings, "host-pools"):
        if not store.add_host_pool(name, now_ms(), who or _user()):
            raise AlreadyExists(f"host pool {name!r} exists")
    return {"name": name, "hosts": []}


def delete_host_pool(settings: Settings, store: QueryStore, name: str, who: str = "") -> list[str]:
    """Delete a host pool; its hosts (and those on their way in) move to the default pool at once,
    their runs staying, as Peloton's do. Returns the hosts moved."""
    with pool_tree_lock(settings, "host-pools"):
        problem = delete_problem(name, store.host_pools())
        if problem:
            raise (NotFound if problem.startswith("no host pool") else UserError)(problem)
        hosts = current_pools(admin.list_hosts(settings))
        desired = {h: d for h, (_p, d) in store.host_pool_members().items()}
        moved = sorted(h for h, pool in hosts.items() if pool == name or desired.get(h) == name)
        _send_moves(settings, [(h, DEFAULT_POOL, "") for h in moved], who, at_once=True)
        store.remove_host_pool(name)
    return moved


def change_host_pool(settings: Settings, store: QueryStore, host_id: str, pool: str, source: str = "",
                     who: str = "") -> dict:
    """Move a host to another host pool: at once when nothing runs on it, else after its runs
    drain (their jobs' disruption budgets hold). `source`: the pool the operator saw it in."""
    with pool_tree_lock(settings, "host-pools"):
        hosts = current_pools(admin.list_hosts(settings))
        problem = change_problem(store.host_pools(), hosts, host_id, pool, source)
        if problem:
            raise (NotFound if problem.startswith("no ") else UserError)(problem)
        _send_moves(settings, [(host_id, pool, source)], who)
    return {"host_id": host_id, "source_pool": hosts[host_id], "pool": pool}


def _send_moves(settings: Settings, moves: list[tuple[str, str, str]], who: str, at_once: bool = False) -> None:
    if not moves:
        return
    out = admin.emitter(settings)
    for host_id, pool, source in moves:
        out.emit("placements", host_id, "peloton.HostPoolChange", {
            "request_id": uuid.uuid4().hex, "host_id": host_id, "pool": pool, "source_pool": source,
            "at_once": at_once, "requested_by": who or _user(), "sent_ms": now_ms()})
    admin.deliver(out, settings)


def _user() -> str:
    return os.environ.get("USER", "")
