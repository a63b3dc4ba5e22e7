"""What SQLite and PostgreSQL spell differently, for the one SQL store (store.py) and its migrations.

Statements and migrations are written once, with `?` for each parameter and a few {words}; a
dialect turns them into its own text once, when a store class is made (compile) or a migration
read (ddl), never per call:

    ?          a parameter: `?` (sqlite3) or `%s` (psycopg)
    {list}     "is one of a list given as one parameter" (list_param): SQLite looks each value up
               through json_each, PostgreSQL through = ANY(array); one statement text for any
               length, so it is prepared once (a list of `?` was prepared again per length)
    {keys}     a table (kj, ki) of (job id, instance) keys given as keys_params
    {seq}      the column that orders rows as they were inserted: SQLite's rowid, PostgreSQL's seq
    {binary}   after a text column: compare it byte by byte (PostgreSQL's text follows the
               database's collation; SQLite's is binary already)
    {returning:COL}  RETURNING COL, for an insert whose new rows' keys executemany returns
               (_insert_new): PostgreSQL's. sqlite3's executemany drops what RETURNING returns,
               and an insert with it costs SQLite 60 % more per row: there, nothing.
    {blob}     the type of a bytes column (migrations)
    {serial}   a column that numbers rows as inserted, where one is needed (migrations): nothing in
               SQLite (its rowid does it)

Both speak the same upsert (INSERT ... ON CONFLICT ... DO UPDATE SET c = excluded.c, or DO
NOTHING) and UPDATE ... RETURNING, so those need no word.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson


def _json_list(values: Iterable) -> str:
    return orjson.dumps(list(values)).decode()


def _sqlite_keys(keys: list[tuple[str, int]]) -> tuple:
    return (_json_list(keys),)


def _postgres_keys(keys: list[tuple[str, int]]) -> tuple:
    return ([k[0] for k in keys], [k[1] for k in keys])


class _Clause:
    """A word with an argument, {word:ARG}: its text with ARG in it."""

    def __init__(self, text: str):
        self.text = text

    def __format__(self, arg: str) -> str:
        return self.text.format(arg)


@dataclass(frozen=True)
class Dialect:
    name: str  # for messages
    mark: str  # a parameter's placeholder
    words: dict[str, object] = field(default_factory=dict)  # {word} -> its text in statements
    ddl_words: dict[str, str] = field(default_factory=dict)  # {word} -> its text in migrations
    # How a list parameter ({list}) and (job id, instance) keys ({keys}) are passed.
    list_param: Callable[[Iterable], object] = list
    keys_params: Callable[[list[tuple[str, int]]], tuple] = _postgres_keys
    # A lone key is found faster by `= ?` than through a list (SQLite's json_each costs a
    # virtual table per statement; PostgreSQL's = ANY is as cheap for one).
    single_keys_apart: bool = False
    # SQL listing the tables of the database a connection is on (name in column 0), and the
    # columns of one table, given as a parameter (name in column 0).
    tables_sql: str = ""
    columns_sql: str = ""

    def compile(self, template: str) -> str:
        """A statement written with `?` and {words}, in this dialect."""
        text = template.format(**self.words)
        return text if self.mark == "?" else text.replace("%", "%%").replace("?", self.mark)

    def ddl(self, template: str) -> str:
        """A migration's statement in this dialect (its {words} replaced; no parameters)."""
        return template.format(**self.ddl_words)


SQLITE = Dialect(
    name="SQLite",
    mark="?",
    words={"list": "IN (SELECT value FROM json_each(?))",
           "keys": "(SELECT value ->> 0 AS kj, value ->> 1 AS ki FROM json_each(?)) AS k",
           "seq": "rowid", "binary": "", "returning": _Clause("")},
    ddl_words={"blob": "BLOB", "serial": ""},
    list_param=_json_list,
    keys_params=_sqlite_keys,
    single_keys_apart=True,
    tables_sql="SELECT name FROM sqlite_master WHERE type = 'table'",
    columns_sql="SELECT name FROM pragma_table_info(?)",
)

POSTGRES = Dialect(
    name="PostgreSQL",
    mark="%s",
    words={"list": "= ANY(?)", "keys": "unnest(?::text[], ?::int[]) AS k(kj, ki)", "seq": "seq",
           "binary": ' COLLATE "C"', "returning": _Clause(" RETURNING {}")},
    ddl_words={"blob": "BYTEA", "serial": "seq BIGSERIAL PRIMARY KEY,"},
    list_param=list,
    keys_params=_postgres_keys,
    tables_sql="SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()",
    columns_sql="SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = %s",
)
