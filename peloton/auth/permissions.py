"""Pool permissions, as Peloton's pool files already say who owns a pool (`owningTeam`,
`ldapGroups`): a user acts on the jobs of a pool when one of their groups owns it. A pool that
names no group inherits its parent's owners; a pool whose whole line up to the root names none is
for administrators only. Administrators (an admin token, or a group in PELOTON_ADMIN_GROUPS)
change pools and hosts and act in every pool. Pure: the API and the stages ask the same function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from peloton.auth.tokens import Principal
from peloton.model.states import UPDATE_ACTIONS

# What only administrators do.
ADMIN_ACTIONS = frozenset({"pool.create", "pool.update", "pool.delete", "host.maintenance", "host.pool",
                           "token.issue", "token.revoke", "token.list", "dead_letter.read", "dead_letter.replay",
                           "cluster.read", "cluster.lockdown"})
# What a pool's owners do with the jobs in it (reading included: a job's config holds its environment).
JOB_ACTIONS = frozenset({"job.create", "job.read", "job.stop", "job.start", "job.restart", "job.update",
                         "job.delete", "update.pause", "update.resume", "update.abort", "update.rollback"})
# What any known user may read: the pool tree, the hosts and the stages' lag (no task's config is
# in them).
READ_ACTIONS = frozenset({"pool.read", "host.read", "lag.read"})


def command_action(kind: str) -> str:
    """The action a job command's kind asks for: job.stop for STOP, update.pause for PAUSE."""
    return f"{'update' if kind in UPDATE_ACTIONS else 'job'}.{kind.lower()}"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str


class PoolsAbove:
    """The pools `owners` reads, each fetched when it first asks (get_pool(path) -> config or
    None): a pool and those above it, no more. For a caller that has not read the whole tree
    anyway: the API read every pool's config for each call it checked (4.8 ms with 1,000 pools),
    where owners needs at most the pool's line up to the root, and an administrator or a read
    action none."""

    def __init__(self, get_pool: Callable[[str], dict | None]) -> None:
        self._get_pool = get_pool
        self._read: dict[str, dict | None] = {}

    def get(self, path: str, default: dict | None = None) -> dict | None:
        if path not in self._read:
            self._read[path] = self._get_pool(path)
        found = self._read[path]
        return default if found is None else found


def owners(pools: dict[str, dict] | PoolsAbove, path: str) -> tuple[str, frozenset[str]]:
    """The pool (this one or the nearest parent) that names owning groups, and those groups;
    ("", {}) when no pool up to the root names any."""
    at = path
    while at:
        config = pools.get(at)
        if config is not None and not config.get("deleted"):
            named = {config.get("owning_team") or "", *(config.get("ldap_groups") or ())} - {""}
            if named:
                return at, frozenset(named)
        if at == "/":
            break
        at = at.rsplit("/", 1)[0] or "/"
    return "", frozenset()


def decide(principal: Principal, action: str, pool: str | None, pools: dict[str, dict] | PoolsAbove,
           admin_groups: frozenset[str] = frozenset()) -> Decision:
    """May this principal do this action (in this pool, for job actions)? Always with the reason."""
    if principal.admin:
        return Decision(True, f"{principal.user} holds an admin token")
    admin_by_group = sorted(principal.groups & admin_groups)
    if admin_by_group:
        return Decision(True, f"{principal.user} is in {admin_by_group[0]}, an administrators' group")
    if action in READ_ACTIONS:
        return Decision(True, f"any user may {action.replace('.', ' ')}")
    if action not in JOB_ACTIONS:
        return Decision(False, f"{action} is for administrators, and {principal.describe()} is not one")
    if pool is None:
        return Decision(False, f"{action} needs a pool")
    where, groups = owners(pools, pool)
    if not groups:
        return Decision(False, f"pool {pool} names no owningTeam or ldapGroups, nor does any pool above it: "
                               f"only administrators act there")
    shared = sorted(principal.groups & groups)
    inherited = "" if where == pool else f" (inherited by {pool})"
    if shared:
        return Decision(True, f"{principal.user} is in {shared[0]}, which owns {where}{inherited}")
    return Decision(False, f"{principal.user} is in none of {', '.join(sorted(groups))}, the groups that own "
                           f"{where}{inherited}")
