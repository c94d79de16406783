"""Isolated stores for tests: one SQLite file or one PostgreSQL schema per test."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sqlalchemy import text

from brainhands.shared.store.engine import create_engine


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
