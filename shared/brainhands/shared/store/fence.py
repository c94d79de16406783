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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Insert, Table, bindparam, cast, func, select, update
from sqlalchemy.engine import Connection

from brainhands.shared.errors import NotFoundError, StaleLeaseError, StoreError
from brainhands.shared.keys import operation_resource
from brainhands.shared.store import schema
from brainhands.shared.store.hot import HotStatement, hot, run

_s = schema.session
_CLAIM_SESSION = hot(
    update(_s)
    .where(_s.c.id == bindparam("sid"), _s.c.fence < bindparam("below", type_=_s.c.fence.type))
    .values(fence=bindparam("token", type_=_s.c.fence.type))
    .returning(*_s.c)
)
_CHECK_SESSION = hot(
    select(
        *(
            cast(bindparam("token", type_=c.type), c.type).label(c.name) if c.name == "fence" else c
            for c in _s.c
        )
    ).where(_s.c.id == bindparam("sid"), _s.c.fence < bindparam("token", type_=_s.c.fence.type))
)
_SESSION_FENCES = hot(
    select(_s.c.id, _s.c.fence).where(_s.c.id.in_(bindparam("ids", expanding=True)))
)


def claim_session_fence(conn: Connection, session_id: str, token: int) -> Any:
    """Raise the session's fence to ``token`` if it is higher and return the session row;
    refuse otherwise. One statement, on the caller's (sync) connection."""
    [claimed] = claim_session_fences(conn, [(session_id, token)])
    if isinstance(claimed, BaseException):
        raise claimed
    return claimed


def claim_session_fences(
    conn: Connection, claims: Sequence[tuple[str, int]], *, defer: Sequence[bool] = ()
) -> list[Any]:
    """``claim_session_fence`` for each ``(session_id, token)``, all in one round trip where
    the backend pipelines: each session's row, or the error refusing its claim. A claim
    whose ``defer`` is true is only checked: its row is read if its fence is below the token
    (and shows the token as its fence), refused as a claim would be otherwise; the holder's
    first commit claims the fence (``Draft.claims_fence``)."""
    found = []
    deferred = set(i for i, d in enumerate(defer) if d)
    for statement, chosen in ((_CLAIM_SESSION, False), (_CHECK_SESSION, True)):
        params = [
            {"sid": sid, "below": token, "token": token}
            for i, (sid, token) in enumerate(claims)
            if (i in deferred) is chosen
        ]
        if params:
            found += run(conn, statement, params[0] if len(params) == 1 else params).all()
    return session_claims(conn, claims, found)


def session_claims(
    conn: Connection, claims: Sequence[tuple[str, int]], found: Sequence[Any]
) -> list[Any]:
    """Each of ``claims``' session row among the rows its statements returned (``found``),
    or the error refusing it: the stored fence is read for the refused ones."""
    claimed = rows_for(found, claims, key=lambda row: (row.id, row.fence))
    refused = [sid for (sid, _), row in zip(claims, claimed, strict=True) if row is None]
    current = _fences(conn, _SESSION_FENCES, refused)
    return [
        row if row is not None else refusal("session", sid, token, current.get(sid))
        for (sid, token), row in zip(claims, claimed, strict=True)
    ]


def rows_for(
    rows: Sequence[Any], writes: Sequence[tuple[str, int]], key: Callable[[Any], tuple[str, int]]
) -> list[Any]:
    """The row each of ``writes`` (a resource's id and the token it was written with)
    returned, or None for one refused: the rows of a batch of guarded writes, at most one
    for each, told apart by ``key`` (the id and fence a row holds). Two writes of one id
    and token (duplicate deliveries) get one row between them."""
    by_write: dict[tuple[str, int], list[Any]] = {}
    for row in rows:
        by_write.setdefault(key(row), []).append(row)
    return [by_write[w].pop(0) if by_write.get(w) else None for w in writes]


def refusal(kind: str, resource_id: str, token: int, current: int | None) -> StoreError:
    """Why a write guarded by ``token`` matched no row of ``kind`` (session, operation): the
    row is missing (``current`` is None), or the token was superseded."""
    if current is None:
        return NotFoundError(f"{kind} {resource_id} does not exist")
    return StaleLeaseError(f"{kind}:{resource_id}", token, int(current))


def _fences(conn: Connection, statement: HotStatement, ids: list[str]) -> dict[str, int]:
    if not ids:
        return {}
    return {row[0]: int(row[1]) for row in run(conn, statement, {"ids": ids})}


@functools.cache
def _claim_operation(insert: Callable[[Table], Any]) -> HotStatement:
    """``INSERT ... ON CONFLICT DO UPDATE ... WHERE fence < :fence RETURNING *``.

    The new row's columns are bound by name; the conflict branch takes the token and the
    time from the row that was proposed (``excluded``), so each is bound only once. It also
    counts the claim among the row's ``unsettled_claims`` (a row of an earlier build, which
    has no count, is taken to hold one already: its claimer may have made the call).
    """
    o = schema.operation
    stmt = insert(o)
    upsert: Insert = stmt.on_conflict_do_update(
        index_elements=[o.c.operation_id],
        set_={
            "fence": stmt.excluded.fence,
            "updated_at": stmt.excluded.updated_at,
            "unsettled_claims": func.coalesce(o.c.unsettled_claims, 1) + 1,
        },
        where=o.c.fence < stmt.excluded.fence,
    )
    return hot(upsert.returning(*o.c))


_OPERATION_FENCES = hot(
    select(schema.operation.c.operation_id, schema.operation.c.fence).where(
        schema.operation.c.operation_id.in_(bindparam("ids", expanding=True))
    )
)


def operation_fences(conn: Connection, operation_ids: list[str]) -> dict[str, int]:
    """The stored fence of each of ``operation_ids`` that has a row."""
    return _fences(conn, _OPERATION_FENCES, operation_ids)


@dataclass(frozen=True)
class OperationFenceClaim:
    """A claim of an operation for a lease token; ``intent`` holds the columns a new row
    needs (session_id, task_id, tool, pool, arguments), ignored when the row exists."""

    operation_id: str
    token: int
    intent: dict[str, Any]


def claim_operation_fences(
    conn: Connection, insert: Callable[[Table], Any], claims: Sequence[OperationFenceClaim]
) -> list[Any]:
    """Create each claim's operation row (``intended``) or raise its fence to the claim's
    token; refuse a claim whose token is not above the stored fence.

    One statement per claim, all sent in one round trip where the backend pipelines them:
    the upsert returns the row as it stands after the claim, and nothing when it refused.
    Returns, for each claim in order, the row or the ``StaleLeaseError`` (with the stored
    fence) refusing it. Runs on the caller's (sync) connection, inside its transaction;
    ``insert`` is the backend's (``Backend.insert``).
    """
    now = time.time()
    values = [
        {
            **claim.intent,
            "operation_id": claim.operation_id,
            "status": "intended",
            "unsettled_claims": 1,
            "fence": claim.token,
            "created_at": now,
            "updated_at": now,
        }
        for claim in claims
    ]
    statement = _claim_operation(insert)
    by_columns: dict[frozenset[str], list[dict[str, Any]]] = {}
    for row_values in values:  # one statement per set of columns
        by_columns.setdefault(frozenset(row_values), []).append(row_values)
    found = [
        row
        for group in by_columns.values()
        for row in run(conn, statement, group[0] if len(group) == 1 else group)
    ]
    claimed = rows_for(found, [(c.operation_id, c.token) for c in claims], key=operation_write)
    current = operation_fences(
        conn, [c.operation_id for c, row in zip(claims, claimed, strict=True) if row is None]
    )
    return [
        row
        or StaleLeaseError(operation_resource(c.operation_id), c.token, current.get(c.operation_id))
        for c, row in zip(claims, claimed, strict=True)
    ]


def operation_write(row: Any) -> tuple[str, int]:
    """The operation id and fence of an operation row, as ``rows_for`` tells writes apart."""
    return row.operation_id, row.fence
