"""Outbox rows: claimed by relays, marked sent after the broker confirms, pruned later.

On PostgreSQL ``FOR UPDATE SKIP LOCKED`` (``Backend.skip_locked``) lets several relays drain
the outbox at once, each taking rows the others have not locked. SQLite has no row locks: a
relay's writing transaction holds the database lock, so there one relay drains at a time.
"""

from __future__ import annotations

import time

from sqlalchemy import bindparam, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from brainhands.shared.store import schema
from brainhands.shared.store.backend import Backend
from brainhands.shared.store.hot import hot, run
from brainhands.shared.store.records import OutboxRow
from brainhands.shared.store.store import Store


async def claim_unsent(backend: Backend, conn: AsyncConnection, limit: int) -> list[OutboxRow]:
    """The oldest unsent rows, locked for this transaction (skipping rows others locked).

    Rows still handed to their writer's relay (``publish_after`` in the future) are left to it.
    """
    o = schema.outbox
    stmt = (
        select(o.c.id, o.c.routing_key, o.c.body, o.c.headers)
        .where(
            o.c.sent_at.is_(None),
            or_(o.c.publish_after.is_(None), o.c.publish_after <= time.time()),
        )
        .order_by(o.c.id)
        .limit(limit)
    )
    rows = await conn.execute(backend.skip_locked(stmt))
    return [OutboxRow(r.id, r.routing_key, bytes(r.body), r.headers) for r in rows]


_MARK_SENT = hot(
    update(schema.outbox)
    .where(schema.outbox.c.id.in_(bindparam("ids", expanding=True)))
    .values(sent_at=bindparam("now", type_=schema.outbox.c.sent_at.type))
)


async def mark_sent(conn: AsyncConnection, ids: list[int]) -> None:
    """Record that the broker confirmed these rows (in the caller's transaction)."""
    if ids:
        await conn.execute(_MARK_SENT.statement, {"ids": ids, "now": time.time()})


async def mark_sent_now(store: Store, ids: list[int]) -> None:
    """Record that the broker confirmed these rows: one statement, in one hop."""
    if ids:
        await store.backend.write(
            lambda conn: run(conn, _MARK_SENT, {"ids": ids, "now": time.time()}),
            single_statement=True,
        )


async def prune_sent(store: Store, *, older_than: float) -> int:
    """Delete rows confirmed more than ``older_than`` seconds ago; return how many."""
    o = schema.outbox
    cutoff = time.time() - older_than
    async with store.backend.transaction() as conn:
        done = await conn.execute(delete(o).where(o.c.sent_at.is_not(None), o.c.sent_at < cutoff))
    return int(done.rowcount)


async def outbox_backlog(store: Store) -> tuple[int, float | None]:
    """How many rows are unsent, and when the oldest of them was written."""
    o = schema.outbox
    async with store.backend.snapshot() as conn:
        row = (
            await conn.execute(
                select(func.count(), func.min(o.c.created_at)).where(o.c.sent_at.is_(None))
            )
        ).one()
    return int(row[0]), row[1]


async def sessions_with_unsent(store: Store, session_ids: list[str]) -> set[str]:
    """Those of ``session_ids`` that have outbox rows no relay has published yet."""
    if not session_ids:
        return set()
    o = schema.outbox
    stmt = (
        select(o.c.session_id)
        .where(o.c.sent_at.is_(None), o.c.session_id.in_(session_ids))
        .distinct()
    )
    async with store.backend.snapshot() as conn:
        return set((await conn.execute(stmt)).scalars())
