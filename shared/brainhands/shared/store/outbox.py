"""Outbox rows: claimed by relays, marked sent after the broker confirms, pruned later.

On PostgreSQL ``FOR UPDATE SKIP LOCKED`` (``Backend.skip_locked``) lets several relays drain
the outbox at once, each taking rows the others have not locked. SQLite has no row locks: a
relay's writing transaction holds the database lock, so there one relay drains at a time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from functools import partial

from sqlalchemy import Integer, bindparam, case, delete, func, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.store.hot import hot
from brainhands.shared.store.records import OutboxRow

MARK_BATCH = 500
"""Rows marked sent by one statement at most (its parameters: two a row)."""

_o = schema.outbox
_CLAIM = (
    select(_o.c.id, _o.c.routing_key, _o.c.body, _o.c.headers)
    .where(
        _o.c.sent_at.is_(None),
        or_(
            _o.c.publish_after.is_(None),
            _o.c.publish_after <= bindparam("now", type_=_o.c.publish_after.type),
        ),
    )
    .order_by(_o.c.id)
    .limit(bindparam("limit", type_=Integer))
)
"""The oldest unsent rows not handed to their writer's relay (``Outbox.claim``), built once
for every relay's every poll."""
_MARK_SENT = hot(
    update(schema.outbox)
    .where(schema.outbox.c.id.in_(bindparam("ids", expanding=True)))
    .values(sent_at=bindparam("now", type_=schema.outbox.c.sent_at.type))
)


@dataclass(frozen=True)
class ClaimedRows:
    """Unsent rows locked by one transaction until it ends (``Outbox.claim``)."""

    rows: list[OutboxRow]
    _conn: AsyncConnection

    async def mark_sent(self, ids: list[int]) -> None:
        """Record that the broker confirmed these rows, in the transaction that claimed them."""
        if ids:
            await self._conn.execute(_MARK_SENT.statement, {"ids": ids, "now": time.time()})


class Outbox:
    """The outbox's rows, reached as ``store.outbox``: what relays publish."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._claim = backend.skip_locked(_CLAIM)

    @contextlib.asynccontextmanager
    async def claim(self, limit: int) -> AsyncIterator[ClaimedRows]:
        """The oldest unsent rows, locked for one transaction (skipping rows others locked)
        that ends when the block does.

        Rows still handed to their writer's relay (``publish_after`` in the future) are left
        to it.
        """
        async with self._backend.transaction() as conn:
            rows = await conn.execute(self._claim, {"now": time.time(), "limit": limit})
            found = [OutboxRow(r.id, r.routing_key, bytes(r.body), r.headers) for r in rows]
            yield ClaimedRows(found, conn)

    async def mark_sent(self, confirmed: Sequence[tuple[int, float]]) -> None:
        """Record that the broker confirmed these rows (id, when), ``MARK_BATCH`` rows a
        statement, each in one hop."""
        o = schema.outbox
        for start in range(0, len(confirmed), MARK_BATCH):
            batch = dict(confirmed[start : start + MARK_BATCH])
            stmt = update(o).where(o.c.id.in_(batch)).values(sent_at=case(batch, value=o.c.id))
            await self._backend.write(
                partial(Connection.execute, statement=stmt), single_statement=True
            )

    async def prune(self, *, older_than: float) -> int:
        """Delete rows confirmed more than ``older_than`` seconds ago; return how many."""
        o = schema.outbox
        cutoff = time.time() - older_than
        async with self._backend.transaction() as conn:
            done = await conn.execute(
                delete(o).where(o.c.sent_at.is_not(None), o.c.sent_at < cutoff)
            )
        return int(done.rowcount)

    async def backlog(self) -> tuple[int, float | None]:
        """How many rows are unsent, and when the oldest of them was written."""
        o = schema.outbox
        async with self._backend.snapshot() as conn:
            row = (
                await conn.execute(
                    select(func.count(), func.min(o.c.created_at)).where(o.c.sent_at.is_(None))
                )
            ).one()
        return int(row[0]), row[1]

    async def sessions_with_unsent(self, session_ids: list[str]) -> set[str]:
        """Those of ``session_ids`` that have outbox rows no relay has published yet."""
        if not session_ids:
            return set()
        o = schema.outbox
        stmt = (
            select(o.c.session_id)
            .where(o.c.sent_at.is_(None), o.c.session_id.in_(session_ids))
            .distinct()
        )
        async with self._backend.snapshot() as conn:
            return set((await conn.execute(stmt)).scalars())
