"""Which transaction a store call runs in: one of its own, or its caller's (`Store.transaction`).

Each store class keeps what it runs on in `_engine`: the process's engine, where every call opens a
short transaction of its own, or a connection already in a transaction, where its calls are
statements of that one. The hot calls (a node's step bookkeeping: a handful a model call) execute
statements built once at import on that connection, not through an ORM session: on SQLite a
session and a pooled connection per call cost about five times the statement itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Column, Connection, Engine, Table
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql.dml import Insert

Part = TypeVar("Part")


@contextmanager
def connected(bind: Engine | Connection) -> Iterator[Connection]:
    """A connection in a transaction: `bind` itself when it is one (its caller commits), else a new one from
    the engine, committed when the block ends and rolled back when it raises."""
    if isinstance(bind, Connection):
        yield bind
        return
    with bind.begin() as connection:
        yield connection


def on_connection(part: Part, connection: Connection) -> Part:
    """A copy of one of the store's classes that runs on `connection`: its calls join that transaction
    (a session on a connection in a transaction joins it, and its commits only flush). Caches, such as
    the checkpoints' conversations, stay shared with the original."""
    # copy.copy's result at a quarter of its cost: every transaction binds all 17 classes.
    bound = object.__new__(type(part))
    bound.__dict__.update(vars(part), _engine=connection)
    return bound


def inserts_skipping_taken(table: Table, key: list[str], returning: Column) -> dict[str, Insert]:
    """An INSERT that skips a row whose `key` is taken (ON CONFLICT DO NOTHING, returning `returning` only for a row
    it wrote), by dialect name. Built once at import: a write that cannot fail on a duplicate can be one statement
    of a larger transaction, which an IntegrityError and its rollback would end."""
    return {
        dialect: insert(table).on_conflict_do_nothing(index_elements=key).returning(returning)
        for dialect, insert in (("sqlite", sqlite_insert), ("postgresql", postgresql_insert))
    }
