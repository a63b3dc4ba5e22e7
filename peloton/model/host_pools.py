"""Host pools, as Peloton's host manager keeps them: every host is in exactly one pool (the
default pool until an operator moves it), a host carries its pool as the label `host_pool`, and
a job is steered to a pool by a HOST-kind label constraint on that label. Pure: no Kafka, no
store. The host manager applies moves (stages/launch), the API checks them (pelotonctl/admin)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

DEFAULT_POOL = "default"  # Peloton's common.DefaultHostPoolID: it always exists and cannot go
POOL_LABEL = "host_pool"  # Peloton's common.HostPoolKey: the label placement matches
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a host pool, or None."""
    if not _NAME.match(name):
        return (f"host pool name {name!r} refused: 1 to 63 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit")
    return None


def pool_of(members: Mapping[str, tuple[str, str]], host_id: str) -> str:
    """The host pool a host is in now."""
    member = members.get(host_id)
    return member[0] if member else DEFAULT_POOL


def pools_with_hosts(made: Iterable[str], host_pools: Mapping[str, str]) -> dict[str, list[str]]:
    """Every pool (the default one, those made, and any a host is still in) with its hosts,
    sorted: what `hostmgr hostpool list` shows. `host_pools`: host id -> its pool now."""
    pools: dict[str, list[str]] = {DEFAULT_POOL: [], **{name: [] for name in made}}
    for host_id, pool in sorted(host_pools.items()):
        pools.setdefault(pool, []).append(host_id)
    return dict(sorted(pools.items()))


def change_problem(made: Iterable[str], host_pools: Mapping[str, str], host_id: str, pool: str,
                   source: str = "") -> str | None:
    """Why moving `host_id` to `pool` is refused, or None: the host is unknown, the pool was
    never made, or the host is not in the `source` pool the operator named."""
    if host_id not in host_pools:
        return f"no host {host_id!r} is known (see `pelotonctl host list`)"
    if pool != DEFAULT_POOL and pool not in set(made):
        return f"no host pool {pool!r} (make it first: `pelotonctl hostmgr hostpool create {pool}`)"
    current = host_pools[host_id]
    if source and source != current:
        return f"host {host_id} is in host pool {current!r}, not {source!r}"
    return None


def delete_problem(name: str, made: Iterable[str]) -> str | None:
    if name == DEFAULT_POOL:
        return f"the {DEFAULT_POOL!r} host pool cannot be deleted: every host not in another pool is in it"
    if name not in set(made):
        return f"no host pool {name!r}"
    return None
