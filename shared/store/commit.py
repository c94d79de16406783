"""Applying a draft: one transaction, guarded by the session's version and fence.

The guard is the first statement: it bumps the session's version and reserves the entry
sequence numbers in one ``UPDATE ... WHERE version = :v AND fence = :t``. Every later
statement of the commit runs only after that row is locked by this transaction, so commits
of one session are serialized and entry ``seq`` stays gap-free.
"""

from __future__ import annotations

import time

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.errors import ConflictError, NotFoundError, StaleLeaseError
from shared.store import schema
from shared.store.draft import Draft, OutboxMessage
from shared.store.records import CommitReceipt


async def apply_draft(conn: AsyncConnection, draft: Draft) -> CommitReceipt:
    """Apply every change of ``draft`` on ``conn`` (inside the caller's transaction)."""
    now = time.time()
    s = schema.session
    guarded = await conn.execute(
        update(s)
        .where(s.c.id == draft.session_id, s.c.version == draft.version, s.c.fence == draft.fence)
        .values(
            version=s.c.version + 1,
            entry_count=s.c.entry_count + len(draft.entries),
            updated_at=now,
        )
        .returning(s.c.entry_count)
    )
    entry_count = guarded.scalar_one_or_none()
    if entry_count is None:
        await _raise_guard_failure(conn, draft)
    assert entry_count is not None
    first_seq = entry_count - len(draft.entries) + 1
    seqs = list(range(first_seq, entry_count + 1))

    if draft.entries:
        await conn.execute(
            insert(schema.entry),
            [
                {
                    "session_id": draft.session_id,
                    "seq": seq,
                    "kind": e.kind,
                    "body": e.body,
                    "created_at": now,
                }
                for seq, e in zip(seqs, draft.entries, strict=True)
            ],
        )
    for doc in draft.documents:
        await _write_document(conn, draft.session_id, doc.name, doc.body, doc.expected_version, now)
    if draft.new_tasks:
        await conn.execute(
            insert(schema.task),
            [
                {**t, "session_id": draft.session_id, "created_at": now, "updated_at": now}
                for t in draft.new_tasks
            ],
        )
    t = schema.task
    for change in draft.task_updates:
        stmt = update(t).where(t.c.id == change.task_id, t.c.session_id == draft.session_id)
        if change.expected_status is not None:
            stmt = stmt.where(t.c.status == change.expected_status)
        done = await conn.execute(stmt.values(**change.changes, updated_at=now))
        if done.rowcount != 1:
            raise ConflictError(
                f"task {change.task_id} of session {draft.session_id} is missing or no longer "
                f"{change.expected_status}"
            )
    if draft.new_submissions:
        await conn.execute(
            insert(schema.submission),
            [
                {**sub, "session_id": draft.session_id, "created_at": now, "updated_at": now}
                for sub in draft.new_submissions
            ],
        )
    sub_t = schema.submission
    for sub_change in draft.submission_updates:
        done = await conn.execute(
            update(sub_t)
            .where(sub_t.c.id == sub_change.submission_id, sub_t.c.session_id == draft.session_id)
            .values(**sub_change.changes, updated_at=now)
        )
        if done.rowcount != 1:
            raise NotFoundError(f"submission {sub_change.submission_id} not found")
    if draft.outbox:
        await insert_outbox(conn, draft.session_id, draft.outbox, now)
    return CommitReceipt(
        session_id=draft.session_id,
        version=draft.version + 1,
        entry_seqs=seqs,
        outbox_rows=len(draft.outbox),
    )


async def insert_outbox(
    conn: AsyncConnection, session_id: str | None, messages: list[OutboxMessage], now: float
) -> None:
    """Add outbox rows in the caller's transaction."""
    await conn.execute(
        insert(schema.outbox),
        [
            {
                "session_id": session_id,
                "routing_key": m.routing_key,
                "body": m.body,
                "headers": m.headers,
                "created_at": now,
            }
            for m in messages
        ],
    )


async def _raise_guard_failure(conn: AsyncConnection, draft: Draft) -> None:
    s = schema.session
    row = (
        await conn.execute(select(s.c.version, s.c.fence).where(s.c.id == draft.session_id))
    ).one_or_none()
    if row is None:
        raise NotFoundError(f"session {draft.session_id} does not exist")
    if row.fence != draft.fence:
        raise StaleLeaseError(f"session:{draft.session_id}", draft.fence, row.fence)
    raise ConflictError(
        f"session {draft.session_id} is at version {row.version}, the draft was read at "
        f"{draft.version}"
    )


async def _write_document(
    conn: AsyncConnection,
    session_id: str,
    name: str,
    body: object,
    expected_version: int | None,
    now: float,
) -> None:
    d = schema.document
    if expected_version is None:
        await conn.execute(
            insert(d).values(session_id=session_id, name=name, version=1, body=body, updated_at=now)
        )
        return
    done = await conn.execute(
        update(d)
        .where(d.c.session_id == session_id, d.c.name == name, d.c.version == expected_version)
        .values(version=expected_version + 1, body=body, updated_at=now)
    )
    if done.rowcount != 1:
        raise ConflictError(
            f"document {name!r} of session {session_id} is not at version {expected_version}"
        )
