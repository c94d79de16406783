"""Isolated stores for tests: one SQLite file or one PostgreSQL schema per test."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
from sqlalchemy import text

from brainhands.shared.store.backends.postgres.engine import create_engine
from tests.helpers.polling import eventually


@dataclass(frozen=True)
class StoreTarget:
    url: str
    schema: str | None

    def env(self) -> dict[str, str]:
        """The settings a worker process needs to open this store."""
        env = {"BRAINHANDS_DATABASE_URL": self.url}
        if self.schema:
            env["BRAINHANDS_DATABASE_SCHEMA"] = self.schema
        return env


async def drop_schema(url: str, schema: str) -> None:
    engine = create_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    await engine.dispose()


def drop_pg_schema(url: str, schema: str) -> None:
    """``drop_schema`` for synchronous fixtures."""
    asyncio.run(drop_schema(url, schema))


@contextlib.asynccontextmanager
async def holding_a_transaction(target: StoreTarget) -> AsyncIterator[asyncpg.Connection]:
    """Another client of ``target``'s PostgreSQL schema, in a transaction: the rows it writes
    stay locked until the block ends, and are committed then."""
    assert target.schema is not None
    conn = await asyncpg.connect(
        target.url.replace("postgresql+asyncpg", "postgresql"),
        server_settings={"search_path": target.schema},
    )
    try:
        async with conn.transaction():
            yield conn
    finally:
        await conn.close()


async def until_waiting_on_a_lock(conn: asyncpg.Connection, what: str) -> None:
    """Return once the server shows a statement waiting for a lock (asked on ``conn``)."""
    waiting = "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    await eventually(lambda: conn.fetchval(waiting), within=30, what=what)
