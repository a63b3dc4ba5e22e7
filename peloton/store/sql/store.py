"""The one SQL store: every method of the gateway, written once for SQLite and PostgreSQL alike
(see sql/base.py for how a backend runs them)."""

from __future__ import annotations

from typing import Any

from peloton.store.base import StorageGateway
from peloton.store.sql.allocations import AllocationsSql
from peloton.store.sql.base import compile_statements
from peloton.store.sql.claims import ClaimsSql
from peloton.store.sql.host_pools import HostPoolsSql
from peloton.store.sql.jobs import JobsSql
from peloton.store.sql.queries import QueriesSql
from peloton.store.sql.tokens import TokensSql
from peloton.store.sql.volumes import VolumesSql


class SqlStore(JobsSql, AllocationsSql, ClaimsSql, HostPoolsSql, QueriesSql, TokensSql, VolumesSql,
               StorageGateway):
    """The gateway over SQL; a subclass that sets `dialect` gets its statements compiled."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "dialect" in vars(cls):
            cls.q = compile_statements(cls, cls.dialect)
