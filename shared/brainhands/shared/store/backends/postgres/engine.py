"""PostgreSQL's engine (asyncpg under SQLAlchemy) with the settings the store relies on,
and the driver's errors as the store's (``driver_error``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

from brainhands.shared.errors import (
    BrainhandsError,
    ConflictError,
    NotFoundError,
    StoreError,
    StoreUnavailable,
)
from brainhands.shared.store.backends.postgres.hot import UNAVAILABLE

CONFLICT = "BH409"
MISSING = "BH404"
REFUSALS: dict[str, type[BrainhandsError]] = {CONFLICT: ConflictError, MISSING: NotFoundError}
"""The SQLSTATEs a chained write raises when its guard refuses (``chained``), and the store
error each one is."""

PING_AFTER_IDLE_S = 5.0
"""A pooled PostgreSQL connection idle for longer than this is pinged before use."""
PLANNER_SETTINGS = {"enable_seqscan": "off"}
"""Settings of every PostgreSQL connection of a store: its planner takes an index whenever
there is one, whatever a table's size.

The store's statements find their rows by key, and each connection caches one generic plan
for each of them (asyncpg prepares them). A plan made while a table is a few pages -- a new
store, a fresh schema -- scans that table whole, and stays cached as the table grows, until
an ANALYZE replaces it. In a burst of 1,000 sessions on a new store the session claim read
about 390 pages each time and the start of a call about 220, and PostgreSQL spent 4.4 ms of
CPU per session; with this setting, 35 and 15 pages and 2.1 ms. A statement with no index to
take still scans (the setting only makes a scan the last resort)."""


def create_engine(url: str, *, pool_size: int = 10, db_schema: str | None = None) -> AsyncEngine:
    """An engine for the PostgreSQL database at ``url`` with the settings the store relies
    on; ``db_schema`` puts every table in that schema, so several deployments or test runs
    can share one database."""
    # The hook SQLAlchemy's asyncpg dialect opens connections with, given the URL's arguments.
    settings = {**PLANNER_SETTINGS, **({"search_path": db_schema} if db_schema else {})}
    connect_args: dict[str, Any] = {
        "async_creator_fn": _connect_to_the_end,
        "server_settings": settings,
    }
    engine = create_async_engine(
        url, pool_size=pool_size, max_overflow=pool_size, connect_args=connect_args
    )
    _ping_idle_connections(engine)
    return engine


async def _connect_to_the_end(*args: Any, **kwargs: Any) -> Any:
    """``asyncpg.connect``, run to its end even when the caller is cancelled.

    A worker whose lease is lost cancels its store call wherever it is, opening a connection
    included (a connection cancelled mid-statement is discarded, so the next call opens one).
    asyncpg does not tidy up after a connect cancelled mid-handshake: the futures it leaves
    behind log ERROR tracebacks on the event loop ("Future exception was never retrieved",
    "protocol.data_received() call failed"). So the connect runs in a task of its own; the
    caller still stops at once, and a connection nobody waits for any more is closed.
    """
    connecting = asyncio.ensure_future(asyncpg.connect(*args, **kwargs))
    try:
        return await asyncio.shield(connecting)
    except asyncio.CancelledError:
        connecting.add_done_callback(_close_abandoned)
        raise


def _close_abandoned(connecting: asyncio.Future[Any]) -> None:
    # Reading the exception marks it retrieved: a failed connect nobody waits for is no error.
    if not connecting.cancelled() and connecting.exception() is None:
        connecting.result().terminate()


def _ping_idle_connections(engine: AsyncEngine) -> None:
    """``pool_pre_ping`` for connections that sat idle in the pool, not for every checkout.

    asyncpg's ping is three round trips (BEGIN; ``;``; ROLLBACK): paid on every checkout it
    costs a commit as much as its own statements. A connection checked in moments ago is
    alive; if it is not (the server restarted within the last seconds) the statement fails
    with the retryable ``StoreUnavailable`` and the pool is invalidated.
    """

    @event.listens_for(engine.sync_engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        record.info["checked_in_at"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(
        dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: PoolProxiedConnection
    ) -> None:
        idle_since = record.info.get("checked_in_at")
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool discards the connection and checks out (or opens) another.
            raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc


def driver_error(exc: Exception) -> BrainhandsError | None:
    """The store error for an asyncpg error, or None for anything else."""
    refused = REFUSALS.get(getattr(exc, "sqlstate", None) or "")
    if refused is not None and isinstance(exc, asyncpg.PostgresError):
        return refused(f"store refused a commit: {exc.message}")
    if isinstance(exc, asyncpg.IntegrityConstraintViolationError):
        return ConflictError(f"store rejected a write: {exc}")
    if isinstance(exc, UNAVAILABLE):
        # Also a server shutting down or starting up, and a statement cancelled by it.
        return StoreUnavailable(f"store connection lost: {exc}")
    if isinstance(exc, asyncpg.PostgresError):
        return StoreError(f"store error: {exc}")
    return None
