"""The store's database behind one door: PostgreSQL and SQLite as two classes of one kind.

``open_backend`` chooses the class once, from the URL; nothing else in the store asks which
database it runs on.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from brainhands.shared.store.backends.base import Backend
from brainhands.shared.store.backends.postgres import Postgres
from brainhands.shared.store.backends.postgres import engine as postgres_engine
from brainhands.shared.store.backends.sqlite import Sqlite
from brainhands.shared.store.engine import create_engine, create_sqlite_writer

__all__ = ["Backend", "Postgres", "Sqlite", "open_backend"]


async def open_backend(url: str, *, pool_size: int = 10, db_schema: str | None = None) -> Backend:
    """The backend for ``url``: SQLite for a ``sqlite`` URL, PostgreSQL otherwise.

    ``db_schema`` (PostgreSQL only) puts every table in that schema, created if missing,
    so several deployments or test runs can share one database.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        return Sqlite(create_engine(url), create_sqlite_writer(url))
    engine = postgres_engine.create_engine(url, pool_size=pool_size, db_schema=db_schema)
    backend = Postgres(engine, kept=max(1, pool_size // 2))
    if db_schema:
        try:
            async with backend.transaction() as conn:
                await conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{db_schema}"'))
        except BaseException:
            await backend.close()  # a starting process tries again with a new one
            raise
    return backend
