"""Creating SQLite's engines with the settings the store relies on, and translating
driver errors into the store's error tree (``backends`` use both; PostgreSQL's engine is
``backends.postgres.engine``)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import (
    DBAPIError,
    IntegrityError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from brainhands.shared.errors import (
    BrainhandsError,
    ConflictError,
    StoreError,
    StoreUnavailable,
)

SQLITE_BUSY_TIMEOUT_MS = 30_000
WAL_SWITCH_WAIT_MS = 100
"""How long one attempt to switch a new SQLite file to WAL mode waits for a lock."""
READ_ONLY = "brainhands_read_only"

DriverError = Callable[[Exception], BrainhandsError | None]
"""A backend's store error for an error its driver raised, or None if it is none of its."""


def create_engine(url: str) -> AsyncEngine:
    """An engine for the SQLite database at ``url`` with the settings the store relies on
    (PostgreSQL's: ``backends.postgres.engine``)."""
    engine = create_async_engine(url, connect_args={"timeout": 30})
    _configure_sqlite(engine.sync_engine)
    return engine


def create_sqlite_writer(url: str) -> Engine | None:
    """A sync (pysqlite) engine on the SQLite file at ``url``, for commits in a worker thread.

    None for an in-memory database, which a second engine would not share.
    """
    parsed = make_url(url)
    if not parsed.database or parsed.database == ":memory:" or "mode=memory" in url:
        return None
    engine = create_sync_engine(
        parsed.set(drivername="sqlite+pysqlite"),
        connect_args={"timeout": 30, "check_same_thread": False},
    )
    _configure_sqlite(engine)
    return engine


def _switch_to_wal(cursor: Any) -> None:
    """Put the database in WAL mode (a no-op once any connection did).

    The first connections to a new file race to switch it. The loser can get "database is
    locked" at once (SQLite skips the busy handler where waiting could deadlock), or wait
    for a lock the winner's connection keeps for as long as it is open. So each attempt
    waits only briefly, and is tried again until ``SQLITE_BUSY_TIMEOUT_MS`` has passed.
    """
    cursor.execute(f"PRAGMA busy_timeout={WAL_SWITCH_WAIT_MS}")
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise


def _configure_sqlite(sync_engine: Engine) -> None:
    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Take transaction control away from the driver so "begin" below decides it.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        _switch_to_wal(cursor)
        # Statements wait this long for a lock another connection holds (a migration, say).
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        read_only = conn.get_execution_options().get(READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


@contextlib.contextmanager
def wrap_driver_errors(driver_error: DriverError = lambda _exc: None) -> Any:
    """Translate SQLAlchemy/driver exceptions into the store's error tree; ``driver_error``:
    a backend's own for the errors its driver raises past SQLAlchemy (hot statements)."""
    try:
        yield
    except BrainhandsError:
        raise
    except IntegrityError as exc:
        raise ConflictError(f"store rejected a write: {exc.orig}") from exc
    except OperationalError as exc:
        raise StoreUnavailable(f"store unavailable: {exc.orig}") from exc
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise StoreUnavailable(f"store connection lost: {exc.orig}") from exc
        raise StoreError(f"store error: {exc.orig}") from exc
    except (OSError, ConnectionError) as exc:
        raise StoreUnavailable(f"store unreachable: {exc}") from exc
    except SQLAlchemyError as exc:
        raise StoreError(f"store error: {exc}") from exc
    except Exception as exc:
        error = driver_error(exc)
        if error is None:
            raise
        raise error from exc
