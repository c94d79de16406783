"""Accepted input: one submission per ``(session, request_id)``, however often it is sent.

Submitting needs no session lease: it inserts the submission (and the session, on first
contact) and the wake-up in one transaction, and a Brain picks the submission up from
there. Re-submitting the same request id returns the original and wakes nobody.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Insert, Table, bindparam, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import schema
from brainhands.shared.store.commit import insert_outbox_sync
from brainhands.shared.store.draft import OutboxMessage, new_id
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

    One transaction in one hop, of statements built once: the session's insert (a no-op
    when it exists), a read of its key and tenant, the submission's insert returning the
    row (or, for a request id seen before, a read of the original), and the wake-up.
    """
    now = time.time()
    handoff = store.handoff

    def work(conn: Connection) -> tuple[SubmissionRecord, tuple[OutboxRow, ...]]:
        inserts = _inserts(store.backend.insert)
        conn.execute(
            inserts.session,
            {"id": session_id, "uid": new_id(), "compat": compat, "tenant": tenant, "now": now},
        )
        key, owner = conn.execute(_SESSION_KEY, {"sid": session_id}).one()
        if tenant is not None and owner != tenant:
            raise NotFoundError(f"session {session_id} does not exist")
        params = {"id": new_id(), "sid": session_id, "rid": request_id, "input": input, "now": now}
        row = conn.execute(inserts.submission, params).one_or_none()
        if row is None:  # seen before: the original, and no wake-up
            return _by_request_sync(conn, session_id, request_id), ()
        rows = insert_outbox_sync(conn, session_id, [wake(str(key))], now, handoff=handoff)
        return SubmissionRecord(**dict(row._mapping)), rows

    record, rows = await store.backend.write(work)
    if rows:
        store.notify(CommitReceipt(session_id, version=-1, entry_seqs=[], outbox=rows))
    return SubmitReceipt(record, created=bool(rows))


@dataclass(frozen=True)
class _Inserts:
    session: Insert
    submission: Insert


@functools.cache
def _inserts(insert: Callable[[Table], Any]) -> _Inserts:
    """A dialect's ``INSERT ... ON CONFLICT DO NOTHING`` of a session and a submission."""
    s, sub = schema.session, schema.submission
    now = bindparam("now", type_=s.c.created_at.type)
    return _Inserts(
        session=insert(s)
        .values(
            id=bindparam("id"),
            uid=bindparam("uid"),
            compat=bindparam("compat"),
            tenant=bindparam("tenant"),
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["id"]),
        submission=insert(sub)
        .values(
            id=bindparam("id"),
            session_id=bindparam("sid"),
            request_id=bindparam("rid"),
            status="queued",
            input=bindparam("input", type_=sub.c.input.type),
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["session_id", "request_id"])
        .returning(*sub.c),
    )


_SESSION_KEY = select(schema.session.c.compat, schema.session.c.tenant).where(
    schema.session.c.id == bindparam("sid")
)


_BY_REQUEST = select(schema.submission).where(
    schema.submission.c.session_id == bindparam("sid"),
    schema.submission.c.request_id == bindparam("rid"),
)


async def get_submission(store: Store, session_id: str, request_id: str) -> SubmissionRecord:
    """The submission of ``request_id`` in ``session_id``, as it stands now: one statement,
    in one hop (what a waiting client reads again at every notification)."""
    return await store.backend.read(lambda conn: _by_request_sync(conn, session_id, request_id))


def _by_request_sync(conn: Connection, session_id: str, request_id: str) -> SubmissionRecord:
    row = conn.execute(_BY_REQUEST, {"sid": session_id, "rid": request_id}).one_or_none()
    if row is None:
        raise NotFoundError(f"no submission {request_id!r} in session {session_id}")
    return SubmissionRecord(**dict(row._mapping))


async def session_submissions(store: Store, session_id: str) -> list[SubmissionRecord]:
    """Every submission of ``session_id``, oldest first."""
    async with store.backend.snapshot() as conn:
        return await submissions_in(conn, session_id)


async def submissions_in(conn: AsyncConnection, session_id: str) -> list[SubmissionRecord]:
    """``session_submissions``, read in the transaction of ``conn``."""
    sub = schema.submission
    rows = await conn.execute(
        select(sub).where(sub.c.session_id == session_id).order_by(sub.c.created_at)
    )
    return [SubmissionRecord(**dict(r._mapping)) for r in rows]
