"""Accepted input: one submission per ``(session, request_id)``, however often it is sent.

Submitting needs no session lease: it inserts the submission (and the session, on first
contact) and the wake-up in one transaction, and a Brain picks the submission up from
there. Re-submitting the same request id returns the original and wakes nobody.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, bindparam, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import schema
from brainhands.shared.store.commit import insert_outbox
from brainhands.shared.store.draft import OutboxMessage, new_id
from brainhands.shared.store.engine import (
    dialect_insert,
    read_in_one_hop,
    read_transaction,
    write_transaction,
)
from brainhands.shared.store.records import CommitReceipt, OutboxRow, SubmissionRecord
from brainhands.shared.store.store import Store


@dataclass(frozen=True)
class SubmitReceipt:
    submission: SubmissionRecord
    created: bool
    """False when the request id was seen before: nothing new was started."""


async def submit(
    store: Store,
    *,
    session_id: str,
    request_id: str,
    input: Any,
    compat: str,
    wake: Callable[[str], OutboxMessage],
    tenant: str | None = None,
) -> SubmitReceipt:
    """Accept ``input`` once for ``(session_id, request_id)`` and wake the session's Brains.

    A new session is created for the Brains of ``compat`` (and for ``tenant``); an existing
    one keeps the key it was created with, and ``wake(key)`` builds the wake-up for that
    key. With ``tenant``, a session of another tenant (or of none) is ``NotFoundError``.
    """
    now = time.time()
    rows: tuple[OutboxRow, ...] = ()
    async with write_transaction(store.engine) as conn:
        insert = dialect_insert(conn)
        await conn.execute(
            insert(schema.session)
            .values(
                id=session_id,
                uid=new_id(),
                compat=compat,
                tenant=tenant,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["id"])
        )
        if tenant is not None:
            s = schema.session
            owner = await conn.execute(select(s.c.tenant).where(s.c.id == session_id))
            if owner.scalar_one() != tenant:
                raise NotFoundError(f"session {session_id} does not exist")
        created = await conn.execute(
            insert(schema.submission)
            .values(
                id=new_id(),
                session_id=session_id,
                request_id=request_id,
                status="queued",
                input=input,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["session_id", "request_id"])
        )
        is_new = created.rowcount == 1
        if is_new:
            s = schema.session
            key = await conn.execute(select(s.c.compat).where(s.c.id == session_id))
            rows = await insert_outbox(
                conn, session_id, [wake(str(key.scalar_one()))], now, handoff=store.handoff
            )
        record = await _by_request(conn, session_id, request_id)
    if is_new:
        store.notify(CommitReceipt(session_id, version=-1, entry_seqs=[], outbox=rows))
    return SubmitReceipt(record, is_new)


_BY_REQUEST = select(schema.submission).where(
    schema.submission.c.session_id == bindparam("sid"),
    schema.submission.c.request_id == bindparam("rid"),
)


async def get_submission(store: Store, session_id: str, request_id: str) -> SubmissionRecord:
    """The submission of ``request_id`` in ``session_id``, as it stands now: one statement,
    in one hop (what a waiting client reads again at every notification)."""

    def read(conn: Connection) -> Row[Any] | None:
        return conn.execute(_BY_REQUEST, {"sid": session_id, "rid": request_id}).one_or_none()

    row = await read_in_one_hop(store.engine, read)
    if row is None:
        raise NotFoundError(f"no submission {request_id!r} in session {session_id}")
    return SubmissionRecord(**dict(row._mapping))


async def _by_request(conn: AsyncConnection, session_id: str, request_id: str) -> SubmissionRecord:
    sub = schema.submission
    row = (
        await conn.execute(
            select(sub).where(sub.c.session_id == session_id, sub.c.request_id == request_id)
        )
    ).one_or_none()
    if row is None:
        raise NotFoundError(f"no submission {request_id!r} in session {session_id}")
    return SubmissionRecord(**dict(row._mapping))


async def session_submissions(store: Store, session_id: str) -> list[SubmissionRecord]:
    """Every submission of ``session_id``, oldest first."""
    async with read_transaction(store.engine) as conn:
        return await submissions_in(conn, session_id)


async def submissions_in(conn: AsyncConnection, session_id: str) -> list[SubmissionRecord]:
    """``session_submissions``, read in the transaction of ``conn``."""
    sub = schema.submission
    rows = await conn.execute(
        select(sub).where(sub.c.session_id == session_id).order_by(sub.c.created_at)
    )
    return [SubmissionRecord(**dict(r._mapping)) for r in rows]
