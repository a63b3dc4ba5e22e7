"""Lockdown as operators set it (Peloton's `admin lock|unlock`, v1alpha AdminService): the
components locked are rows of the store, which the API's door and the job manager read (at most a
second late) to refuse what they freeze (peloton/model/lockdown.py)."""

from __future__ import annotations

from peloton.model.lockdown import component_problem
from peloton.runtime import now_ms
from peloton.store import QueryStore


def lockdown(store: QueryStore) -> dict[str, dict]:
    return store.lockdown()


def set_locks(store: QueryStore, components: list[str], locked: bool, who: str) -> dict:
    """Lock (or unlock) each component: those done, and those that cannot be, with why, as
    Peloton's LockdownResponse. A component locked already stays as first locked."""
    done, failed = [], []
    for name in dict.fromkeys(components):
        problem = component_problem(name)
        if problem:
            failed.append({"component": name, "message": problem})
            continue
        store.set_lockdown(name, locked, now_ms(), who)
        done.append(name)
    return {"successes": done, "failures": failed, "locked": store.lockdown()}
