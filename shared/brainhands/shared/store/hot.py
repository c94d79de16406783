"""Hot statements: the runtime's most frequent statements, built once and run by ``run``.

SQLAlchemy's execution of a Core statement -- parameters, cursor adaptation, result
objects -- costs more CPU than the round trip it makes (``bench.hop``). A statement built
once and wrapped by ``hot()`` can be sent by a backend straight to its driver: PostgreSQL's
hops do (``backends.postgres.hot``), compiling each statement once and reading its rows back
as they would come from SQLAlchemy. Everywhere else -- SQLite, the ``AsyncConnection`` paths
-- ``run`` executes the wrapped statement through SQLAlchemy: the statements are written
once, for both backends, and a store module never asks which one runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.sql import Executable

HOT = "brainhands_hot"
"""Execution option of a connection whose hop sends hot statements on its driver: the
``Runner`` that sends them."""

Params = Mapping[str, Any]
"""One set of bind parameters, by key."""

Runner = Callable[[Connection, "HotStatement", "Params | Sequence[Params]"], Any]
"""How a backend's hop runs a hot statement on its driver (``run``'s contract)."""


class HotStatement:
    """A Core statement built once, to be run by ``run``."""

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self.compiled: dict[Any, Any] = {}
        """What a backend's runner compiled of it, by its own key (kept with the statement,
        which lives as long as the process)."""


def hot(statement: Executable) -> HotStatement:
    """Mark ``statement`` (built once, with bind parameters) as hot."""
    return HotStatement(statement)


class HotResult:
    """The rows (or the row count) of a hot statement, read as a SQLAlchemy ``Result``
    (``HotRow``s, or SQLAlchemy's rows where they came through it one by one)."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return self._rows

    def one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise ValueError(f"expected at most one row, got {len(self._rows)}")
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        row = self.one_or_none()
        if row is None:
            raise ValueError("expected one row, got none")
        return row

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one_or_none(self) -> Any:
        row = self.one_or_none()
        return None if row is None else row[0]

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalars(self) -> HotScalars:
        return HotScalars(row[0] for row in self._rows)


class HotScalars(list[Any]):
    """The first column of each row, read as SQLAlchemy's ``ScalarResult``."""

    def all(self) -> list[Any]:
        return list(self)


def run(conn: Connection, statement: HotStatement, params: Params | Sequence[Params]) -> Any:
    """Execute ``statement`` on ``conn``: by the hop's runner where its backend sends hot
    statements on the driver, else through SQLAlchemy. A list of parameter sets runs it once
    for each (rows in order): in one round trip on PostgreSQL (pipelined, atomic together),
    one by one elsewhere."""
    if not isinstance(params, Mapping) and not params:
        return HotResult([], 0)
    runner: Runner | None = conn.get_execution_options().get(HOT)
    if runner is not None:
        return runner(conn, statement, params)
    if isinstance(params, Mapping) or not returns_rows(statement):
        return conn.execute(statement.statement, params)
    # Not every dialect returns rows from an executemany: run them one by one.
    rows = [row for p in params for row in conn.execute(statement.statement, p)]
    return HotResult(rows, len(rows))


def returns_rows(statement: HotStatement) -> bool:
    """Whether ``statement`` is a query, or a write that returns rows."""
    stmt = statement.statement
    return bool(getattr(stmt, "is_select", False) or getattr(stmt, "_returning", ()))
