"""Schema migrations (Alembic), run in-process against the store's own engine.

Concurrent upgrades are safe: on PostgreSQL an advisory lock serializes them, on SQLite
the writing transaction's ``BEGIN IMMEDIATE`` does; the second upgrader finds the schema at
head and does nothing.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from brainhands.shared.store.engine import is_sqlite, write_transaction

MIGRATIONS = Path(__file__).with_name("migrations")
_PG_MIGRATION_LOCK = 0x6272_6169_6E68  # any constant shared by every brainhands process


def _config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision this build knows."""
    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None, "the migrations folder has no revision"
    return head


async def _run(engine: AsyncEngine, action: str, revision: str) -> None:
    async with write_transaction(engine) as conn:
        if not is_sqlite(engine):
            await conn.execute(text(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})"))

        def run(sync_conn: Connection) -> None:
            getattr(command, action)(_config(sync_conn), revision)

        await conn.run_sync(run)


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade the store's schema to ``revision``."""
    await _run(engine, "upgrade", revision)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    """Downgrade the store's schema to ``revision`` (``base`` removes every table)."""
    await _run(engine, "downgrade", revision)


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at, or None for an empty database."""
    async with engine.connect() as conn:

        def read(sync_conn: Connection) -> str | None:
            return MigrationContext.configure(sync_conn).get_current_revision()

        return await conn.run_sync(read)


def behind_head(revision: str | None) -> bool:
    """Whether a store at ``revision`` lacks migrations this build needs: it is empty or at
    an older revision this build knows. A revision it does not know is a newer build's,
    which only adds to what this build uses."""
    if revision is None:
        return True
    script = ScriptDirectory(str(MIGRATIONS))
    known = {r.revision for r in script.walk_revisions()}
    return revision in known and revision != head_revision()
