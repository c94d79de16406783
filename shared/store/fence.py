"""Fence claims: the store's half of a lease.

A lease token from Redis means nothing until the store accepts it. A claim moves the
resource's fence up to the token (``fence < :t``); a token at or below the stored fence is
refused -- equal too, since after Redis restarts empty it may hand the same token to a
second holder. A refusal raises ``StaleLeaseError`` carrying the stored fence, so the
caller learns the floor its next token must exceed: that is how tokens stay strictly
increasing even when Redis counters start over.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.errors import NotFoundError, StaleLeaseError
from shared.store import schema
from shared.store.engine import dialect_insert


async def claim_session_fence(conn: AsyncConnection, session_id: str, token: int) -> int:
    """Raise the session's fence to ``token`` if it is higher; refuse otherwise."""
    s = schema.session
    claimed = await conn.execute(
        update(s).where(s.c.id == session_id, s.c.fence < token).values(fence=token)
    )
    if claimed.rowcount == 1:
        return token
    current = (await conn.execute(select(s.c.fence).where(s.c.id == session_id))).scalar()
    if current is None:
        raise NotFoundError(f"session {session_id} does not exist")
    raise StaleLeaseError(f"session:{session_id}", token, int(current))


async def claim_operation_fence(
    conn: AsyncConnection, operation_id: str, token: int, *, intent: dict[str, Any]
) -> int:
    """Create the operation row (``intended``) or raise its fence to ``token``; refuse otherwise.

    ``intent`` holds the columns a new row needs (session_id, task_id, tool, pool,
    arguments); it is ignored when the row exists.
    """
    o = schema.operation
    now = time.time()
    values = {
        **intent,
        "operation_id": operation_id,
        "status": "intended",
        "fence": token,
        "created_at": now,
        "updated_at": now,
    }
    stmt = dialect_insert(conn)(o).values(**values)
    stmt = stmt.on_conflict_do_update(
        index_elements=[o.c.operation_id],
        set_={"fence": token, "updated_at": now},
        where=o.c.fence < token,
    )
    claimed = await conn.execute(stmt)
    if claimed.rowcount == 1:
        return token
    current = await conn.execute(select(o.c.fence).where(o.c.operation_id == operation_id))
    raise StaleLeaseError(f"operation:{operation_id}", token, int(current.scalar_one()))
