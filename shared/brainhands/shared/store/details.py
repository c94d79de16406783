"""What people look at: a session in full, and the approvals waiting for a decision.

Read for the Client, the API and the CLI (never on a Brain's or a Hands' path), each in one
snapshot, so a view never mixes two moments of a session.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import exists, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.store.load import load_session_sync, operation_record, task_record
from brainhands.shared.store.records import (
    InboxRecord,
    OperationRecord,
    SessionState,
    SubmissionRecord,
    TaskRecord,
)
from brainhands.shared.vocabulary import APPROVAL_KIND, DECISION_PREFIX


@dataclass(frozen=True)
class SessionDetail:
    """A session as it stands, read in one snapshot: its state, every task and operation
    it ever had, its submissions, its inbox and its approvals waiting for a decision."""

    state: SessionState
    tasks: list[TaskRecord]
    operations: list[OperationRecord]
    submissions: list[SubmissionRecord]
    inbox: list[InboxRecord]
    waiting_approvals: list[TaskRecord]


async def read_session_detail(backend: Backend, session_id: str) -> SessionDetail:
    """The detail of ``session_id`` (``NotFoundError`` if there is none)."""
    async with backend.snapshot() as conn:
        state = await conn.run_sync(load_session_sync, session_id, backend.rows)
        tasks, operations = await history_in(conn, session_id)
        return SessionDetail(
            state=state,
            tasks=tasks,
            operations=operations,
            submissions=await submissions_in(conn, session_id),
            inbox=await inbox_in(conn, session_id),
            waiting_approvals=await waiting_approvals_in(conn, session_id),
        )


async def waiting_approvals_in(
    conn: AsyncConnection,
    session_id: str | None = None,
    *,
    tenant: str | None = None,
    limit: int = 1000,
) -> list[TaskRecord]:
    """The approval tasks waiting for a decision (of one session, of ``tenant``'s, or of
    all), oldest first. One whose decision is recorded is no longer listed, even before a
    Brain carries it out."""
    t, i = schema.task, schema.inbox
    decided = exists().where(
        i.c.session_id == t.c.session_id,
        i.c.kind == "signal",
        i.c.key == literal(DECISION_PREFIX) + t.c.id,
    )
    query = select(t).where(t.c.kind == APPROVAL_KIND, t.c.status == "waiting", ~decided)
    if session_id is not None:
        query = query.where(t.c.session_id == session_id)
    if tenant is not None:
        s = schema.session
        query = query.where(exists().where(s.c.id == t.c.session_id, s.c.tenant == tenant))
    query = query.order_by(t.c.created_at, t.c.id).limit(limit)
    return [task_record(row) for row in await conn.execute(query)]


async def history_in(
    conn: AsyncConnection, session_id: str
) -> tuple[list[TaskRecord], list[OperationRecord]]:
    """Every task and operation of ``session_id``, oldest first (``session_history``)."""
    t, o = schema.task, schema.operation
    tasks = await conn.execute(
        select(t).where(t.c.session_id == session_id).order_by(t.c.created_at, t.c.id)
    )
    ops = await conn.execute(select(o).where(o.c.session_id == session_id).order_by(o.c.created_at))
    return [task_record(r) for r in tasks], [operation_record(r) for r in ops]


async def submissions_in(conn: AsyncConnection, session_id: str) -> list[SubmissionRecord]:
    """Every submission of ``session_id``, oldest first (``session_submissions``)."""
    sub = schema.submission
    rows = await conn.execute(
        select(sub).where(sub.c.session_id == session_id).order_by(sub.c.created_at)
    )
    return [SubmissionRecord(**dict(r._mapping)) for r in rows]


async def inbox_in(conn: AsyncConnection, session_id: str) -> list[InboxRecord]:
    """Every inbox request of ``session_id``, oldest first (``session_inbox``)."""
    i = schema.inbox
    rows = await conn.execute(select(i).where(i.c.session_id == session_id).order_by(i.c.id))
    return [InboxRecord(**dict(r._mapping)) for r in rows]
