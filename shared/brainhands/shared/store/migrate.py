"""Schema migrations (Alembic), run in-process against the store's own engine.

Concurrent upgrades are safe: the backend's lock serializes them (an advisory lock on
PostgreSQL, the writing transaction itself on SQLite); the second upgrader finds the schema at
head and does nothing.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from brainhands.shared.store.backends.base import Backend

MIGRATIONS = Path(__file__).with_name("migrations")
_MIGRATION_LOCK = 0x6272_6169_6E68  # any constant shared by every brainhands process


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


async def _run(backend: Backend, action: str, revision: str) -> None:
    async with backend.transaction() as conn:
        await backend.lock(conn, _MIGRATION_LOCK)

        def run(sync_conn: Connection) -> None:
            getattr(command, action)(_config(sync_conn), revision)

        await conn.run_sync(run)


async def upgrade(backend: Backend, revision: str = "head") -> None:
    """Upgrade the store's schema to ``revision``."""
    await _run(backend, "upgrade", revision)


async def downgrade(backend: Backend, revision: str) -> None:
    """Downgrade the store's schema to ``revision`` (``base`` removes every table)."""
    await _run(backend, "downgrade", revision)


async def current_revision(backend: Backend) -> str | None:
    """The revision the database is at, or None for an empty database."""
    async with backend.engine.connect() as conn:

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
