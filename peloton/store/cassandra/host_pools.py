"""Host pools: the pools operators made and each host's pool and the one it is moving to; and the
cluster's lockdown, the other switch operators set. Each table one partition (bucket 0: tens of
pools, the hosts, a few components; read whole). A pool is made under the API's host-pool lock,
so its check-then-write needs no lightweight transaction."""

from __future__ import annotations

from peloton.store.cassandra.session import TS, CassandraSession, insert_cql


class HostPoolsMixin(CassandraSession):
    def host_pools(self) -> dict[str, dict]:
        return {name: {"created_ms": at, "created_by": by or ""} for name, at, by in self._rows(
            "SELECT name, created_ms, created_by FROM host_pools WHERE bucket = 0")}

    def add_host_pool(self, name: str, at_ms: int, by: str) -> bool:
        if self._rows("SELECT name FROM host_pools WHERE bucket = 0 AND name = ?", (name,)):
            return False
        self._write(insert_cql("host_pools", "bucket, name, created_ms, created_by"), [(0, name, at_ms, by, TS)])
        return True

    def remove_host_pool(self, name: str) -> None:
        self._write("DELETE FROM host_pools USING TIMESTAMP ? WHERE bucket = 0 AND name = ?", [(TS, name)])

    def set_host_pool(self, host_id: str, pool: str, desired: str, at_ms: int) -> None:
        self._write(insert_cql("host_pool_members", "bucket, host_id, pool, desired_pool, updated_ms"),
                    [(0, host_id, pool, desired, at_ms, TS)])

    def host_pool_members(self) -> dict[str, tuple[str, str]]:
        return {host: (pool, desired) for host, pool, desired in self._rows(
            "SELECT host_id, pool, desired_pool FROM host_pool_members WHERE bucket = 0")}

    def lockdown(self) -> dict[str, dict]:
        return {c: {"locked_ms": at, "locked_by": by or ""} for c, at, by in self._rows(
            "SELECT component, locked_ms, locked_by FROM lockdown WHERE bucket = 0")}

    def set_lockdown(self, component: str, locked: bool, at_ms: int, by: str) -> None:
        if not locked:
            self._write("DELETE FROM lockdown USING TIMESTAMP ? WHERE bucket = 0 AND component = ?",
                        [(TS, component)])
        elif component not in self.lockdown():  # locked again: the first lock's time and owner stay
            self._write(insert_cql("lockdown", "bucket, component, locked_ms, locked_by"),
                        [(0, component, at_ms, by, TS)])
