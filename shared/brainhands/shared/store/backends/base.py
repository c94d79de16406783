"""What every store backend is: one door to one database (``postgres``, ``sqlite``).

Every store module reaches the database through its backend -- a transaction in one hop
(``write``, ``read``), or ``transaction`` and ``snapshot`` for the paths that await between
statements -- and asks it for what the two databases do differently: the INSERT with
``ON CONFLICT`` (``insert``), how sessions' rows are read (``rows``), notifications of
commits (``listen``), row locks that skip locked rows (``skip_locked``), a lock that
serializes migrations (``lock``), a submission written in one statement
(``submit_at_once``). No store module asks which database it runs on.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar, TypeVar

from sqlalchemy import Engine, Select, Table
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from brainhands.shared.errors import BrainhandsError
from brainhands.shared.store.engine import READ_ONLY, wrap_driver_errors
from brainhands.shared.store.handoff import Handoff
from brainhands.shared.store.load import ROWS_BY_KIND, RowReader
from brainhands.shared.store.submission_plan import SubmitPlan, Submitted

_T = TypeVar("_T")
_S = TypeVar("_S", bound=Select[Any])

Heard = Callable[[str], None]
"""Called with a notification's payload (a session id)."""
Stop = Callable[[], Awaitable[None]]
"""Stops listening and gives the connection back."""


class Backend(ABC):
    """The store's database: ``Postgres`` or ``Sqlite``. What a backend does not say it can
    do, it does as every database can (the defaults below)."""

    notifies: ClassVar[bool] = False
    """Whether a commit sends notifications (``pg_notify``) to listeners (``listen``)."""
    chains_writes: ClassVar[bool] = False
    """Whether one statement can write from the rows another write returns (PostgreSQL's
    data-modifying ``WITH``): writes that depend on a guard are then one statement, atomic
    without a transaction around it."""
    embedded: ClassVar[bool] = False
    """Whether the database lives in this process's files, so the store migrates its own
    schema on first use (a server database is migrated by ``brainhands migrate``)."""
    snapshot_isolation: ClassVar[str | None] = None
    """The isolation level that makes a transaction one snapshot (SQLite's always is)."""
    rows: ClassVar[RowReader] = ROWS_BY_KIND
    """How sessions' rows are read: one statement for all (PostgreSQL), or one per kind."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        """The async engine; outside the store, only tests and benches read through it."""

    @staticmethod
    @abstractmethod
    def insert(table: Table) -> Any:
        """``INSERT`` into ``table`` in this database's dialect, with its ``ON CONFLICT``
        clauses (the same function at every call, so statements built from it are cached)."""

    @staticmethod
    def driver_error(exc: Exception) -> BrainhandsError | None:
        """The store error for an error the driver raised past SQLAlchemy, if it is one."""
        return None

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
        with wrap_driver_errors(self.driver_error):
            async with self.engine.begin() as conn:
                yield conn

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncConnection]:
        """One consistent snapshot for several reads."""
        with wrap_driver_errors(self.driver_error):
            async with self.engine.connect() as raw:
                options: dict[str, Any] = {READ_ONLY: True}
                if self.snapshot_isolation is not None:
                    options["isolation_level"] = self.snapshot_isolation
                conn = await raw.execution_options(**options)
                async with conn.begin():
                    yield conn

    async def listen(self, channel: str, heard: Heard, lost: Callable[[], None]) -> Stop | None:
        """Call ``heard(payload)`` for each notification a commit sends on ``channel``, and
        ``lost()`` if the connection that listens closes; returns how to stop. None where the
        database sends no notifications (listeners poll instead)."""
        return None

    def skip_locked(self, query: _S) -> _S:
        """``query`` locking the rows it reads for this transaction, skipping rows another
        transaction has locked (where the database locks rows)."""
        return query

    async def submit_at_once(self, plan: SubmitPlan, handoff: Handoff) -> Submitted | None:
        """Write ``plan`` in one statement and one hop where the database can, and can
        tell what it did: None where it cannot (then ``store.submissions`` writes it in a
        transaction of statements every database runs)."""
        return None

    @abstractmethod
    async def lock(self, conn: AsyncConnection, key: int) -> None:
        """Take the lock ``key`` until ``conn``'s writing transaction ends, so that
        transactions taking it run one at a time."""

    async def close(self) -> None:
        await self.engine.dispose()
