"""Hot statements (``shared.store.hot``) on PostgreSQL: sent straight to the asyncpg
connection under SQLAlchemy's.

A statement wrapped by ``hot()`` is compiled once for the asyncpg dialect; in a store hop
(``Postgres.write``, ``Postgres.read``) it is then sent on the driver connection, with
SQLAlchemy's own bind processors and the same SQL text, and its rows come back as
``HotRow``s, which read like SQLAlchemy's ``Row`` (attributes, ``_mapping``, index).

A hop runs in autocommit mode and, when it writes in a transaction, sends BEGIN and COMMIT
itself (``hop``), so statements sent either way are in the one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import await_only

from brainhands.shared.errors import BrainhandsError, StoreError
from brainhands.shared.store.hot import HOT, HotResult, HotStatement, Params

UNAVAILABLE = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.OperatorInterventionError,
)
"""The driver's errors that say the connection or the server is gone (or going), or the
connection is in a state it cannot go on from (a server's FATAL message came first)."""

EXPANSIONS_KEPT = 256
"""Renderings of one statement's IN lists kept (one per set of keys and lengths)."""

_T = TypeVar("_T")


def compile_once(
    statement: HotStatement, dialect: Dialect, keys: frozenset[str] | None
) -> _Compiled:
    """``statement`` compiled for ``dialect`` (an INSERT without values of its own: for the
    columns ``keys``), once."""
    found: _Compiled | None = statement.compiled.get(keys)
    if found is None:
        found = statement.compiled[keys] = _Compiled(statement.statement, dialect, keys)
    return found


class _Compiled:
    """One hot statement's SQL for asyncpg, and how to bind it and read its rows."""

    def __init__(self, statement: Executable, dialect: Dialect, keys: frozenset[str] | None):
        assert isinstance(statement, ClauseElement)
        compiled = statement.compile(
            dialect=dialect, column_keys=sorted(keys) if keys is not None else None
        )
        assert isinstance(compiled, SQLCompiler)
        if compiled.has_out_parameters or compiled.insert_prefetch or compiled.update_prefetch:
            raise ValueError(
                "a hot statement cannot have out parameters, nor column defaults computed in Python"
            )
        self.sql = compiled.string
        self.expanding: SQLCompiler | None = (
            compiled if compiled.post_compile_params or compiled.literal_execute_params else None
        )
        """Set when an ``IN`` list is rendered at each execution, as SQLAlchemy does."""
        if compiled.literal_execute_params:
            raise ValueError("a hot statement cannot render values into its SQL")
        self._lists = sorted({bind.key for bind in compiled.post_compile_params})
        """The keys of the parameters that are ``IN`` lists."""
        self._expansions: dict[tuple[tuple[str, ...], tuple[int, ...]], _Expansion] = {}
        """The SQL and argument slots for each set of parameter keys and lengths of lists."""
        self.slots: list[tuple[str, bool, Any, Callable[[Any], Any] | None]] = []
        for name in () if self.expanding is not None else compiled.positiontup or ():
            bind = compiled.binds[name]
            if bind.callable is not None:
                raise ValueError("a hot statement cannot have callable parameters")
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            self.slots.append((bind.key, bind.required, bind.value, processor))
        columns = compiled._result_columns or []
        self.returns_rows = bool(columns)
        self.keys = tuple(c.keyname for c in columns)
        self.index = {key: i for i, key in enumerate(self.keys)}

    def bound(self, params: Params) -> tuple[str, list[Any]]:
        """The SQL and its arguments for ``params``."""
        if self.expanding is None:
            return self.sql, self.args(params)
        shape = (tuple(params), tuple(len(params[key]) for key in self._lists if key in params))
        expansion = self._expansions.get(shape)
        if expansion is None:
            expansion = _expansion(self.expanding, params, self._lists)
            if len(self._expansions) < EXPANSIONS_KEPT:
                self._expansions[shape] = expansion
        sql, slots = expansion
        out = []
        for key, i, processor in slots:
            value = params[key] if i is None else params[key][i]
            out.append(_processed(key, value, processor))
        return sql, out

    def args(self, params: Params) -> list[Any]:
        if self.expanding is not None:
            raise ValueError("a hot statement with an IN list runs with one set of parameters")
        out = []
        for key, required, default, processor in self.slots:
            if key in params:
                value = params[key]
            elif required:
                raise KeyError(f"a value is required for bind parameter {key!r}")
            else:
                value = default
            out.append(_processed(key, value, processor))
        return out


_Expansion = tuple[str, list[tuple[str, int | None, Callable[[Any], Any] | None]]]
"""An ``IN`` list's SQL for given lengths, and where each argument comes from: a parameter's
key, the index in its list (None: the value itself), and its bind processor."""


def _expansion(compiled: SQLCompiler, params: Params, lists: list[str]) -> _Expansion:
    """SQLAlchemy's rendering of ``compiled`` for the lengths of the ``IN`` lists (keys
    ``lists``) in ``params`` (``construct_expanded_state``, 17 us for a short list), with each
    argument's source found by handing it markers instead of the values: the same for every
    call with those keys and lengths."""
    sources: dict[int, tuple[str, int | None]] = {}
    marked: dict[str, Any] = {}
    for key, value in params.items():
        if key in lists:
            marks = [object() for _ in value]
            sources.update((id(mark), (key, i)) for i, mark in enumerate(marks))
            marked[key] = marks
        else:
            marked[key] = mark = object()
            sources[id(mark)] = (key, None)
    state = compiled.construct_expanded_state(marked, escape_names=False)
    slots: list[tuple[str, int | None, Callable[[Any], Any] | None]] = []
    for name in state.positiontup or ():
        key, i = sources[id(state.parameters[name])]
        processor = state.processors.get(name)
        slots.append((key, i, processor))
    return state.statement, slots


def _processed(key: str, value: Any, processor: Callable[[Any], Any] | None) -> Any:
    if processor is None:
        return value
    try:
        return processor(value)
    except (TypeError, ValueError) as exc:  # as SQLAlchemy's StatementError does
        raise StoreError(f"store error: parameter {key!r}: {exc}") from exc


class HotRow:
    """A row of a hot statement, read as SQLAlchemy's ``Row`` is."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: Sequence[Any], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[self._index[name]]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, i: int) -> Any:
        return self._values[i]

    def __len__(self) -> int:
        return len(self._values)

    @property
    def _mapping(self) -> dict[str, Any]:
        return {key: self._values[i] for key, i in self._index.items()}


def run_on_driver(
    conn: Connection, statement: HotStatement, params: Params | Sequence[Params]
) -> Any:
    """``hot.run`` in a PostgreSQL hop: the statement, compiled once, sent on the asyncpg
    connection with SQLAlchemy's own bind processors (a list of parameter sets pipelined in
    one round trip), its rows read back as SQLAlchemy's would be."""
    driver = conn.connection.driver_connection
    assert driver is not None
    if not isinstance(params, Mapping):
        compiled = compile_once(statement, conn.dialect, frozenset(params[0]))
        many = [compiled.args(p) for p in params]
        _announce(conn, "before_cursor_execute", compiled.sql, many, executemany=True)
        if compiled.returns_rows:
            records = await_only(driver.fetchmany(compiled.sql, many))
            result = HotResult(_rows(compiled, records), len(records))
        else:
            await_only(driver.executemany(compiled.sql, many))
            result = HotResult([], len(many))
        _announce(conn, "after_cursor_execute", compiled.sql, many, executemany=True)
        return result
    keys = frozenset(params) if _bare_insert(statement) else None
    compiled = compile_once(statement, conn.dialect, keys)
    sql, args = compiled.bound(params)
    _announce(conn, "before_cursor_execute", sql, args, executemany=False)
    if compiled.returns_rows:
        records = await_only(driver.fetch(sql, *args))
        result = HotResult(_rows(compiled, records), len(records))
    else:
        status: str = await_only(driver.execute(sql, *args))
        count = status.rsplit(" ", 1)[-1]
        result = HotResult([], int(count) if count.isdigit() else -1)
    _announce(conn, "after_cursor_execute", sql, args, executemany=False)
    return result


def _announce(conn: Connection, event: str, sql: str, args: Any, *, executemany: bool) -> None:
    """Tell SQLAlchemy's ``before_cursor_execute`` or ``after_cursor_execute`` listeners, if
    any, as its own execution would (without a cursor or an execution context), so that
    instrumentation sees every statement."""
    listeners = getattr(conn.dispatch, event)
    if listeners:
        listeners(conn, None, sql, args, None, executemany)


def _bare_insert(statement: HotStatement) -> bool:
    """An INSERT naming no values of its own takes its columns from the parameters."""
    stmt = statement.statement
    return getattr(stmt, "is_insert", False) and not getattr(stmt, "_values", None)


def _rows(compiled: _Compiled, records: list[Any]) -> list[HotRow]:
    # Values come back as SQLAlchemy would hand them over: the asyncpg dialect decodes JSON
    # in the driver (its codec) and needs no result processing for our columns' types.
    return [HotRow(r, compiled.index) for r in records]


def hop(conn: Connection, work: Callable[[Connection], _T], *, transaction: bool) -> _T:
    """Run ``work(conn)`` on a PostgreSQL connection with hot statements on the driver, in
    autocommit mode, in a transaction of its own if ``transaction``.

    A failure on a sound connection (a constraint the server enforced, a guard of ours that
    refused) rolls back and leaves the connection in the pool; any other -- a connection
    lost, a cancellation in the middle of a statement -- invalidates it, so that no
    half-done state reaches the next user.
    """
    if not conn.get_execution_options().get(HOT):  # else kept from an earlier hop, set already
        conn.execution_options(isolation_level="AUTOCOMMIT", **{HOT: run_on_driver})
    driver = conn.connection.driver_connection
    assert driver is not None
    try:
        if not transaction:
            return work(conn)
        await_only(driver.execute("BEGIN"))
        result = work(conn)
        await_only(driver.execute("COMMIT"))
        return result
    except BaseException as exc:
        sound = isinstance(exc, BrainhandsError | asyncpg.PostgresError) and not isinstance(
            exc, UNAVAILABLE
        )
        if not sound:
            conn.invalidate(exc if isinstance(exc, Exception) else None)
        elif driver.is_in_transaction():
            try:
                await_only(driver.execute("ROLLBACK"))
            except BaseException:
                conn.invalidate(exc)
        raise
