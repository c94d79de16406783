"""Fence claims: the store's half of a lease.

A lease token from Redis means nothing until the store accepts it. A claim moves the
resource's fence up to the token (``fence < :t``); a token at or below the stored fence is
refused -- equal too, since after Redis restarts empty it may hand the same token to a
second holder. A refusal raises ``StaleLeaseError`` carrying the stored fence, so the
caller learns the floor its next token must exceed: that is how tokens stay strictly
increasing even when Redis counters start over.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Insert, Table, bindparam, select, update
from sqlalchemy.engine import Connection

from brainhands.shared.errors import NotFoundError, StaleLeaseError
from brainhands.shared.store import schema
from brainhands.shared.store.hot import HotStatement, hot, run

if TYPE_CHECKING:
    from brainhands.shared.store.backend import Backend

_s = schema.session
_CLAIM_SESSION = hot(
    update(_s)
    .where(_s.c.id == bindparam("sid"), _s.c.fence < bindparam("below", type_=_s.c.fence.type))
    .values(fence=bindparam("token", type_=_s.c.fence.type))
    .returning(*_s.c)
)
_SESSION_FENCE = hot(select(_s.c.fence).where(_s.c.id == bindparam("sid")))


def claim_session_fence(conn: Connection, session_id: str, token: int) -> Any:
    """Raise the session's fence to ``token`` if it is higher and return the session row;
    refuse otherwise. One statement, on the caller's (sync) connection."""
    params = {"sid": session_id, "below": token, "token": token}
    claimed = run(conn, _CLAIM_SESSION, params).one_or_none()
    if claimed is not None:
        return claimed
    current = run(conn, _SESSION_FENCE, {"sid": session_id}).scalar()
    if current is None:
        raise NotFoundError(f"session {session_id} does not exist")
    raise StaleLeaseError(f"session:{session_id}", token, int(current))


@functools.cache
def _claim_operation(insert: Callable[[Table], Any]) -> HotStatement:
    """``INSERT ... ON CONFLICT DO UPDATE ... WHERE fence < :fence RETURNING *``.

    The new row's columns are bound by name; the conflict branch takes the token and the
    time from the row that was proposed (``excluded``), so each is bound only once.
    """
    o = schema.operation
    stmt = insert(o)
    upsert: Insert = stmt.on_conflict_do_update(
        index_elements=[o.c.operation_id],
        set_={"fence": stmt.excluded.fence, "updated_at": stmt.excluded.updated_at},
        where=o.c.fence < stmt.excluded.fence,
    )
    return hot(upsert.returning(*o.c))


_OPERATION_FENCE = hot(
    select(schema.operation.c.fence).where(
        schema.operation.c.operation_id == bindparam("operation_id")
    )
)


def claim_operation_fence(
    conn: Connection, backend: Backend, operation_id: str, token: int, *, intent: dict[str, Any]
) -> Any:
    """Create the operation row (``intended``) or raise its fence to ``token``; refuse otherwise.

    One statement: the upsert returns the row as it stands after the claim, and returns
    nothing when the stored fence is at or above ``token``. ``intent`` holds the columns a
    new row needs (session_id, task_id, tool, pool, arguments); it is ignored when the row
    exists. Runs on the caller's (sync) connection, inside its transaction.
    """
    now = time.time()
    values = {
        **intent,
        "operation_id": operation_id,
        "status": "intended",
        "fence": token,
        "created_at": now,
        "updated_at": now,
    }
    claimed = run(conn, _claim_operation(backend.insert), values).one_or_none()
    if claimed is not None:
        return claimed
    current: int = run(conn, _OPERATION_FENCE, {"operation_id": operation_id}).scalar_one()
    raise StaleLeaseError(f"operation:{operation_id}", token, current)
