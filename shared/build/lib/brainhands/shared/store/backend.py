"""The store's database behind one door: PostgreSQL and SQLite as two backends of one class.

``Backend.open`` chooses the class once, from the URL. Every store module then reaches the
database through its backend -- a transaction in one hop (``write``, ``read``), or
``transaction`` and ``snapshot`` for the paths that await between statements -- and asks it
for what the two databases do differently: the INSERT with ``ON CONFLICT`` (``insert``),
notifications sent by a commit (``notifies``), row locks that skip locked rows
(``skip_locked``), a lock that serializes migrations (``lock``). No store module asks which
database it runs on.

SQLite runs in WAL mode with ``BEGIN IMMEDIATE`` for writing transactions, so two writers
queue on the database lock at the start of a transaction instead of failing half way
through it; reads use plain deferred transactions and never wait on a writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from sqlalchemy import Engine, Select, Table, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

from brainhands.shared.store import hot
from brainhands.shared.store.engine import (
    PING_AFTER_IDLE_S,
    READ_ONLY,
    create_engine,
    create_sqlite_writer,
    wrap_driver_errors,
)

_T = TypeVar("_T")
_S = TypeVar("_S", bound=Select[Any])


class Backend(ABC):
    """The store's database: ``Postgres`` or ``Sqlite``."""

    notifies: ClassVar[bool]
    """Whether commits notify listeners (``notifications``); where not, they poll."""
    chains_writes: ClassVar[bool]
    """Whether one statement can write from the rows another write returns (PostgreSQL's
    data-modifying ``WITH``): writes that depend on a guard are then one statement, atomic
    without a transaction around it."""
    embedded: ClassVar[bool]
    """Whether the database lives in this process's files, so the store migrates its own
    schema on first use (a server database is migrated by ``brainhands migrate``)."""
    snapshot_isolation: ClassVar[str | None]
    """The isolation level that makes a transaction one snapshot (SQLite's always is)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        """The async engine; outside the store, only tests and benches read through it."""

    @staticmethod
    async def open(url: str, *, pool_size: int = 10, db_schema: str | None = None) -> Backend:
        """The backend for ``url``: SQLite for a ``sqlite`` URL, PostgreSQL otherwise.

        ``db_schema`` (PostgreSQL only) puts every table in that schema, created if missing,
        so several deployments or test runs can share one database.
        """
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            return Sqlite(create_engine(url), create_sqlite_writer(url))
        engine = create_engine(url, pool_size=pool_size, db_schema=db_schema)
        backend = Postgres(engine, kept=max(1, pool_size // 2))
        if db_schema:
            async with backend.transaction() as conn:
                await conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{db_schema}"'))
        return backend

    @staticmethod
    @abstractmethod
    def insert(table: Table) -> Any:
        """``INSERT`` into ``table`` in this database's dialect, with its ``ON CONFLICT``
        clauses (the same function at every call, so statements built from it are cached)."""

    @property
    def writes_on(self) -> Engine:
        """The sync engine whose connections run ``write`` (for event listeners)."""
        return self.engine.sync_engine

    @abstractmethod
    async def write(
        self, work: Callable[[Connection], _T], *, single_statement: bool = False
    ) -> _T:
        """Run ``work(conn)`` in a writing transaction of its own, in one hop.

        ``single_statement`` work, whose writes are atomic on their own (one statement, or
        one statement pipelined for many sets of parameters), may run without a transaction
        around it. Driver errors leave as store errors.
        """

    @abstractmethod
    async def read(self, work: Callable[[Connection], _T]) -> _T:
        """Run reading ``work(conn)`` in one hop: on PostgreSQL without a transaction around
        it (each statement sees the latest commits), on SQLite in a deferred one."""

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """One writing transaction; driver errors leave as store errors."""
        with wrap_driver_errors():
            async with self.engine.begin() as conn:
                yield conn

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncConnection]:
        """One consistent snapshot for several reads."""
        with wrap_driver_errors():
            async with self.engine.connect() as raw:
                options: dict[str, Any] = {READ_ONLY: True}
                if self.snapshot_isolation is not None:
                    options["isolation_level"] = self.snapshot_isolation
                conn = await raw.execution_options(**options)
                async with conn.begin():
                    yield conn

    def skip_locked(self, query: _S) -> _S:
        """``query`` locking the rows it reads for this transaction, skipping rows another
        transaction has locked (where the database locks rows)."""
        return query

    @abstractmethod
    async def lock(self, conn: AsyncConnection, key: int) -> None:
        """Take the lock ``key`` until ``conn``'s writing transaction ends, so that
        transactions taking it run one at a time."""

    async def close(self) -> None:
        await self.engine.dispose()


class Postgres(Backend):
    """PostgreSQL: hops send hot statements on the asyncpg connection (``hot``)."""

    @staticmethod
    def insert(table: Table) -> Any:
        return postgresql.insert(table)

    notifies = True
    chains_writes = True
    embedded = False
    snapshot_isolation = "REPEATABLE READ"

    def __init__(self, engine: AsyncEngine, *, kept: int = 5) -> None:
        super().__init__(engine)
        self.kept = kept
        """Hop connections kept out of the pool between hops, at most."""
        self._idle: list[tuple[Connection, float]] = []
        """Kept connections and when each was last used, the latest last."""

    async def write(
        self, work: Callable[[Connection], _T], *, single_statement: bool = False
    ) -> _T:
        # The statements, with BEGIN and COMMIT, in one greenlet: the ``AsyncConnection``
        # API would enter a new one for each of them.
        with wrap_driver_errors():
            return await greenlet_spawn(self._hop, work, not single_statement)

    async def read(self, work: Callable[[Connection], _T]) -> _T:
        with wrap_driver_errors():
            return await greenlet_spawn(self._hop, work, False)

    def _hop(self, work: Callable[[Connection], _T], transaction: bool) -> _T:
        conn = self._take()
        try:
            result = hot.hop(conn, work, transaction=transaction)
        except BaseException:
            conn.close()  # back to the pool, which resets it (or drops it, if invalidated)
            raise
        if len(self._idle) < self.kept:
            self._idle.append((conn, time.monotonic()))
        else:
            conn.close()
        return result

    def _take(self) -> Connection:
        """A connection for a hop: a kept one, else one from the pool.

        A hop's connection is kept between hops (in autocommit mode, hot statements on):
        checking one out of SQLAlchemy's pool and back in costs a hop about a tenth of its
        CPU. One kept idle for longer than ``PING_AFTER_IDLE_S`` is pinged first, as the pool
        does with its own (``engine``); one that fails its ping is dropped.
        """
        while self._idle:
            conn, since = self._idle.pop()
            if time.monotonic() - since < PING_AFTER_IDLE_S:
                return conn
            try:
                dbapi_connection = conn.connection.dbapi_connection
                if dbapi_connection is None:
                    raise ConnectionError("the kept connection has no driver connection")
                self.engine.dialect.do_ping(dbapi_connection)
            except Exception as exc:
                conn.invalidate(exc)
                conn.close()
                continue
            return conn
        return self.engine.sync_engine.connect()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn, _since in idle:
            await greenlet_spawn(conn.close)
        await super().close()

    def skip_locked(self, query: _S) -> _S:
        return query.with_for_update(skip_locked=True)

    async def lock(self, conn: AsyncConnection, key: int) -> None:
        await conn.execute(text(f"SELECT pg_advisory_xact_lock({int(key)})"))


class Sqlite(Backend):
    """SQLite: writing hops run in a worker thread on ``writer``, a sync engine on the same
    file (aiosqlite would hop to its thread for every cursor, execute, fetch and close)."""

    @staticmethod
    def insert(table: Table) -> Any:
        return sqlite.insert(table)

    notifies = False
    chains_writes = False
    embedded = True
    snapshot_isolation = None

    def __init__(self, engine: AsyncEngine, writer: Engine | None) -> None:
        super().__init__(engine)
        self.writer = writer
        """None for an in-memory database, which a second engine would not share."""

    @property
    def writes_on(self) -> Engine:
        return self.writer or self.engine.sync_engine

    async def write(
        self, work: Callable[[Connection], _T], *, single_statement: bool = False
    ) -> _T:
        with wrap_driver_errors():
            if self.writer is not None:
                return await asyncio.to_thread(self._write, self.writer, work)
            return await greenlet_spawn(self._write, self.engine.sync_engine, work)

    @staticmethod
    def _write(engine: Engine, work: Callable[[Connection], _T]) -> _T:
        with engine.begin() as conn:
            return work(conn)

    async def read(self, work: Callable[[Connection], _T]) -> _T:
        with wrap_driver_errors():
            return await greenlet_spawn(self._read, work)

    def _read(self, work: Callable[[Connection], _T]) -> _T:
        with self.engine.sync_engine.connect() as conn:
            conn.execution_options(**{READ_ONLY: True})
            with conn.begin():
                return work(conn)

    async def lock(self, conn: AsyncConnection, key: int) -> None:
        """Nothing to take: a writing transaction (``BEGIN IMMEDIATE``) holds the database's
        one write lock already."""

    async def close(self) -> None:
        await super().close()
        if self.writer is not None:
            self.writer.dispose()
