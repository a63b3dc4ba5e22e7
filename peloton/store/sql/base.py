"""What the one SQL store (store.py) is built on: how it runs statements, and where its tables live.

A backend (sqlite.py, postgres.py) is a thin class over SqlStore: it names its dialect and gives
the few things that differ in how statements run (_rows, _count, _many, _insert_new), its
transactions and its pool-tree lock. The methods live in one mixin per part of the gateway
(jobs.py, allocations.py, claims.py, queries.py, tokens.py), each with its statements as
templates (SQL), which SqlStore compiles into the backend's dialect once, when the backend's
class is made, into `q`: a method only picks its statement and passes parameters.

Each table belongs to a part (MAIN, ALLOCATIONS, LAUNCHES): the tables one stage alone writes on
every batch. SQLite keeps each part in a file of its own (a file has one write lock); PostgreSQL
keeps them all in its one database and ignores the part.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from types import SimpleNamespace
from typing import Any, ClassVar

from peloton.store.sql.dialect import Dialect

MAIN, ALLOCATIONS, LAUNCHES = "main", "allocations", "launches"
PARTS = (MAIN, ALLOCATIONS, LAUNCHES)


class SqlBase(ABC):
    """What every mixin may call: the backend's way to run statements, and its compiled ones."""

    dialect: ClassVar[Dialect]
    q: ClassVar[Any]  # the compiled statements, by name (SimpleNamespace)
    SQL: ClassVar[dict[str, str]] = {}  # a mixin's statement templates, by name

    @abstractmethod
    def transaction(self) -> AbstractContextManager: ...

    @abstractmethod
    def _rows(self, part: str, sql: str, params: Sequence = ()) -> list[tuple]:
        """The rows a statement returns."""

    @abstractmethod
    def _count(self, part: str, sql: str, params: Sequence = ()) -> int:
        """How many rows a statement wrote."""

    @abstractmethod
    def _many(self, part: str, sql: str, rows: list[tuple]) -> None:
        """One statement for each of rows (nothing for none)."""

    @abstractmethod
    def _insert_new(self, part: str, known_sql: str, insert_sql: str, rows: list[tuple]) -> set:
        """Insert the rows whose key (their first value) is not in the table yet; returns their
        keys. insert_sql inserts one row, ON CONFLICT DO NOTHING{returning:KEY}; known_sql
        selects the keys of a {list} of them that are there already."""


def compile_statements(cls: type, dialect: Dialect) -> SimpleNamespace:
    """Every SQL template of cls's mixins, in the dialect. Two mixins naming one statement alike
    is a mistake, not an override."""
    compiled: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        for name, template in vars(base).get("SQL", {}).items():
            if name in compiled:
                raise TypeError(f"{base.__name__}.SQL: a statement named {name!r} is defined twice")
            compiled[name] = dialect.compile(template)
    return SimpleNamespace(**compiled)
