"""Host pools: the pools operators made (written by the API) and each host's pool and the one it
is moving to (written by the host manager of the host's shard); and the cluster's lockdown, the
other switch operators set through the API."""

from __future__ import annotations

from peloton.store.sql.base import MAIN, SqlBase


class HostPoolsSql(SqlBase):
    SQL = {
        "host_pools": "SELECT name, created_ms, created_by FROM host_pools",
        "add_host_pool": "INSERT INTO host_pools (name, created_ms, created_by) VALUES (?, ?, ?) "
                         "ON CONFLICT DO NOTHING",
        "remove_host_pool": "DELETE FROM host_pools WHERE name = ?",
        "set_host_pool": "INSERT INTO host_pool_members (host_id, pool, desired_pool, updated_ms) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT (host_id) DO UPDATE SET pool = excluded.pool, "
                         "desired_pool = excluded.desired_pool, updated_ms = excluded.updated_ms",
        "host_pool_members": "SELECT host_id, pool, desired_pool FROM host_pool_members",
        "lockdown": "SELECT component, locked_ms, locked_by FROM lockdown",
        "lock": "INSERT INTO lockdown (component, locked_ms, locked_by) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        "unlock": "DELETE FROM lockdown WHERE component = ?",
    }

    def host_pools(self) -> dict[str, dict]:
        return {name: {"created_ms": at, "created_by": by}
                for name, at, by in self._rows(MAIN, self.q.host_pools)}

    def add_host_pool(self, name: str, at_ms: int, by: str) -> bool:
        return self._count(MAIN, self.q.add_host_pool, (name, at_ms, by)) > 0

    def remove_host_pool(self, name: str) -> None:
        self._count(MAIN, self.q.remove_host_pool, (name,))

    def set_host_pool(self, host_id: str, pool: str, desired: str, at_ms: int) -> None:
        self._count(MAIN, self.q.set_host_pool, (host_id, pool, desired, at_ms))

    def host_pool_members(self) -> dict[str, tuple[str, str]]:
        return {host: (pool, desired) for host, pool, desired in self._rows(MAIN, self.q.host_pool_members)}

    def lockdown(self) -> dict[str, dict]:
        return {c: {"locked_ms": at, "locked_by": by} for c, at, by in self._rows(MAIN, self.q.lockdown)}

    def set_lockdown(self, component: str, locked: bool, at_ms: int, by: str) -> None:
        if locked:
            self._count(MAIN, self.q.lock, (component, at_ms, by))
        else:
            self._count(MAIN, self.q.unlock, (component,))
