"""SQLite: the embedded store, a file in this process's reach.

Runs in WAL mode with ``BEGIN IMMEDIATE`` for writing transactions, so two writers queue on
the database lock at the start of a transaction instead of failing half way through it;
reads use plain deferred transactions and never wait on a writer. No notifications: its
listeners poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

from brainhands.shared.store.backends.base import Backend
from brainhands.shared.store.engine import READ_ONLY, wrap_driver_errors

_T = TypeVar("_T")


class Sqlite(Backend):
    """SQLite: writing hops run in a worker thread on ``writer``, a sync engine on the same
    file (aiosqlite would hop to its thread for every cursor, execute, fetch and close)."""

    insert = staticmethod(sqlite.insert)
    embedded = True

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
