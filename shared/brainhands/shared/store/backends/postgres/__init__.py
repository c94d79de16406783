"""PostgreSQL: the store's server database.

A hop's statements run on a kept asyncpg connection (``hot``), writes that depend on a guard
are one statement (data-modifying ``WITH``: ``chains_writes``), sessions' rows are read by
one statement for all (``rows``), and commits notify listeners (``LISTEN``/``NOTIFY``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

from brainhands.shared.store.backends.base import Backend, Heard, Stop
from brainhands.shared.store.backends.postgres import engine, hot
from brainhands.shared.store.backends.postgres.engine import PING_AFTER_IDLE_S
from brainhands.shared.store.backends.postgres.rows import ROWS_AS_JSON
from brainhands.shared.store.backends.postgres.submit import submit_in_one_statement
from brainhands.shared.store.engine import wrap_driver_errors
from brainhands.shared.store.handoff import Handoff
from brainhands.shared.store.submission_plan import SubmitPlan, Submitted

_T = TypeVar("_T")
_S = TypeVar("_S", bound=Select[Any])


class Postgres(Backend):
    """PostgreSQL: hops send hot statements on the asyncpg connection (``hot``)."""

    insert = staticmethod(postgresql.insert)
    driver_error = staticmethod(engine.driver_error)
    notifies = True
    chains_writes = True
    snapshot_isolation = "REPEATABLE READ"
    rows = ROWS_AS_JSON

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
        with wrap_driver_errors(self.driver_error):
            return await greenlet_spawn(self._hop, work, not single_statement)

    async def read(self, work: Callable[[Connection], _T]) -> _T:
        with wrap_driver_errors(self.driver_error):
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

    async def listen(self, channel: str, heard: Heard, lost: Callable[[], None]) -> Stop:
        with wrap_driver_errors(self.driver_error):
            pooled = await self.engine.raw_connection()
            driver = pooled.driver_connection
            assert driver is not None  # a pooled asyncpg connection always has one

            def on_notification(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
                heard(payload)

            def on_termination(_conn: Any) -> None:
                lost()

            await driver.add_listener(channel, on_notification)
            driver.add_termination_listener(on_termination)

        async def stop() -> None:
            with contextlib.suppress(Exception):  # closing: a dead connection is as good
                driver.remove_termination_listener(on_termination)
                await driver.remove_listener(channel, on_notification)
            # Back to the pool once it listens to nothing (the last listener's removal
            # UNLISTENs); the pool's return runs through the driver's sync adapter, hence
            # the greenlet.
            with contextlib.suppress(Exception):
                await greenlet_spawn(pooled.close)

        return stop

    async def submit_at_once(self, plan: SubmitPlan, handoff: Handoff) -> Submitted | None:
        return await self.write(
            lambda conn: submit_in_one_statement(conn, plan, handoff), single_statement=True
        )

    def skip_locked(self, query: _S) -> _S:
        return query.with_for_update(skip_locked=True)

    async def lock(self, conn: AsyncConnection, key: int) -> None:
        await conn.execute(text(f"SELECT pg_advisory_xact_lock({int(key)})"))
