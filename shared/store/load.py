"""Reading a session back: a fixed number of queries, whatever its size.

One query per row kind (session, entries, documents, open tasks, open submissions), all in
one snapshot, so a Brain rebuilds a consistent context after a restart without N+1 reads.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.errors import NotFoundError
from shared.store import schema
from shared.store.records import (
    OPEN_SUBMISSION_STATUSES,
    DocumentRecord,
    EntryRecord,
    OperationRecord,
    SessionRecord,
    SessionState,
    SubmissionRecord,
    TaskRecord,
)


def _fields(row: Row[Any]) -> dict[str, Any]:
    return dict(row._mapping)


def task_record(row: Row[Any]) -> TaskRecord:
    return TaskRecord(**_fields(row))


def operation_record(row: Row[Any]) -> OperationRecord:
    return OperationRecord(**_fields(row))


async def load_session(conn: AsyncConnection, session_id: str) -> SessionState:
    """Everything a Brain needs to continue ``session_id``, read in five queries."""
    s = schema.session
    row = (await conn.execute(select(s).where(s.c.id == session_id))).one_or_none()
    if row is None:
        raise NotFoundError(f"session {session_id} does not exist")
    e, d, t, sub = schema.entry, schema.document, schema.task, schema.submission
    entries = await conn.execute(
        select(e.c.seq, e.c.kind, e.c.body, e.c.created_at)
        .where(e.c.session_id == session_id)
        .order_by(e.c.seq)
    )
    documents = await conn.execute(
        select(d.c.name, d.c.version, d.c.body).where(d.c.session_id == session_id)
    )
    tasks = await conn.execute(
        select(t)
        .where(t.c.session_id == session_id, t.c.status != "terminal")
        .order_by(t.c.created_at, t.c.id)
    )
    submissions = await conn.execute(
        select(sub)
        .where(sub.c.session_id == session_id, sub.c.status.in_(OPEN_SUBMISSION_STATUSES))
        .order_by(sub.c.created_at)
    )
    return SessionState(
        session=SessionRecord(**_fields(row)),
        entries=[EntryRecord(**_fields(r)) for r in entries],
        documents={r.name: DocumentRecord(**_fields(r)) for r in documents},
        open_tasks=[task_record(r) for r in tasks],
        open_submissions=[SubmissionRecord(**_fields(r)) for r in submissions],
    )
