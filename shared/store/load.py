"""Reading a session back: a fixed number of queries, whatever its size.

One query per row kind (session, entries, documents, open tasks, open submissions, inbox
requests not yet applied), all in one snapshot, so a Brain rebuilds a consistent context
after a restart without N+1 reads;
plus, only when open tasks wait for tasks already settled, one query for those rows.

The operations a Brain reads come with their results: a result stored as a blob is joined
in by the same query (an outer join on the blob's key, so operations without one cost
nothing more) and decoded into ``result``.

``claim_session_sync`` is what a Brain runs when it takes a session: the fence claim and the
reads in one transaction. A Brain that still holds the session's state from its last pass,
at the version the claim returns, re-reads only what can change without a new version: the
open submissions, the inbox and the operations its waiting tool calls refer to.

The statements are built once, with bind parameters, and run on a sync connection: the
caller runs the whole transaction in one greenlet (or one worker thread on SQLite).
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from sqlalchemy import BindParameter, Row, bindparam, or_, select
from sqlalchemy.engine import Connection

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import fence, schema
from brainhands.shared.store.hot import hot, run
from brainhands.shared.store.records import (
    OPEN_SUBMISSION_STATUSES,
    ClaimedSession,
    DocumentRecord,
    EntryRecord,
    InboxRecord,
    OperationRecord,
    SessionRecord,
    SessionState,
    SubmissionRecord,
    TaskRecord,
)

if TYPE_CHECKING:
    from brainhands.shared.store.store import Store

_s, _e, _d, _t, _sub, _o, _b, _i = (
    schema.session,
    schema.entry,
    schema.document,
    schema.task,
    schema.submission,
    schema.operation,
    schema.blob,
    schema.inbox,
)
_SID: BindParameter[str] = bindparam("sid")
_IDS: BindParameter[list[str]] = bindparam("ids", expanding=True)
_SESSION = hot(select(_s).where(_s.c.id == _SID))
_ENTRIES = hot(
    select(_e.c.seq, _e.c.kind, _e.c.body, _e.c.created_at)
    .where(_e.c.session_id == _SID)
    .order_by(_e.c.seq)
)
_DOCUMENTS = hot(select(_d.c.name, _d.c.version, _d.c.body).where(_d.c.session_id == _SID))
_OPEN_TASKS = hot(
    select(_t)
    .where(_t.c.session_id == _SID, _t.c.status != "terminal")
    .order_by(_t.c.created_at, _t.c.id)
)
# The statuses as ``=`` terms, not ``IN (...)``: SQLAlchemy renders an IN list anew at every
# execution (about 40 us of CPU, measured by bench.hop); these are compiled once.
_OPEN_SUBMISSIONS = hot(
    select(_sub)
    .where(_sub.c.session_id == _SID, or_(*(_sub.c.status == s for s in OPEN_SUBMISSION_STATUSES)))
    .order_by(_sub.c.created_at, _sub.c.id)
)
_UNAPPLIED_INBOX = hot(
    select(_i).where(_i.c.session_id == _SID, _i.c.applied_at.is_(None)).order_by(_i.c.id)
)
_TASKS_BY_ID = hot(select(_t).where(_t.c.id.in_(_IDS)))
_OPERATIONS_BY_ID = hot(
    select(_o, _b.c.data.label("result_blob"))
    .select_from(_o.outerjoin(_b, _b.c.id == _o.c.blob_id))
    .where(_o.c.operation_id.in_(_IDS))
)


def _fields(row: Row[Any]) -> dict[str, Any]:
    return dict(row._mapping)


def task_record(row: Row[Any]) -> TaskRecord:
    return TaskRecord(**_fields(row))


def operation_record(row: Row[Any]) -> OperationRecord:
    return OperationRecord(**_fields(row))


def load_session_sync(conn: Connection, session_id: str) -> SessionState:
    """Everything a Brain needs to continue ``session_id``, read in six or seven queries."""
    row = run(conn, _SESSION, {"sid": session_id}).one_or_none()
    if row is None:
        raise NotFoundError(f"session {session_id} does not exist")
    return _read_state(conn, SessionRecord(**_fields(row)))


def claim_session_sync(
    conn: Connection,
    session_id: str,
    token: int,
    known: SessionState | None = None,
    submissions: bool = True,
) -> ClaimedSession:
    """Raise the session's fence to ``token`` and read what the holder needs.

    ``known`` is the state the caller kept from an earlier pass; it is reused when the
    session is still at its version, with its open submissions read again (unless
    ``submissions`` is false: then none are returned). Raises ``StaleLeaseError`` (with
    the stored fence) when ``token`` is not above the fence, ``NotFoundError`` for an
    unknown session.
    """
    session = SessionRecord(**_fields(fence.claim_session_fence(conn, session_id, token)))
    reuse = known is not None and known.session.version == session.version
    if known is not None and reuse:
        # Requests reach the inbox without a commit (no new version): read them again too.
        open_submissions = _open_submissions(conn, session_id) if submissions else []
        inbox = _unapplied_inbox(conn, session_id) if submissions else []
        state = dataclasses.replace(
            known, session=session, open_submissions=open_submissions, inbox=inbox
        )
    else:
        state = _read_state(conn, session)
    waiting = [t.operation_id for t in state.open_tasks if t.status == "waiting" and t.operation_id]
    return ClaimedSession(
        state, operations_by_ids_sync(conn, waiting), submissions_read=submissions or not reuse
    )


async def arrivals(
    store: Store, session_id: str, *, queued: bool
) -> tuple[list[InboxRecord], list[SubmissionRecord]]:
    """What reached ``session_id`` without a commit: its inbox requests not applied yet, and
    (``queued``) its submissions waiting for their turn, oldest first. One hop, a statement
    each: what a holder looks at again in the middle of a pass."""

    def read(conn: Connection) -> tuple[list[InboxRecord], list[SubmissionRecord]]:
        inbox = _unapplied_inbox(conn, session_id)
        if not queued:
            return inbox, []
        waiting = [s for s in _open_submissions(conn, session_id) if s.status == "queued"]
        return inbox, waiting

    return await store.backend.read(read)


def tasks_by_ids_sync(conn: Connection, ids: list[str]) -> dict[str, TaskRecord]:
    if not ids:
        return {}
    return {r.id: task_record(r) for r in run(conn, _TASKS_BY_ID, {"ids": ids})}


def operations_by_ids_sync(conn: Connection, ids: list[str]) -> dict[str, OperationRecord]:
    """The operations of ``ids`` that exist, each with its result (read from its blob)."""
    if not ids:
        return {}
    found = {}
    for row in run(conn, _OPERATIONS_BY_ID, {"ids": ids}):
        fields = _fields(row)
        blob = fields.pop("result_blob")
        if blob is not None:
            fields["result"] = json.loads(blob)
        found[row.operation_id] = OperationRecord(**fields)
    return found


def _read_state(conn: Connection, session: SessionRecord) -> SessionState:
    params = {"sid": session.id}
    entries = [EntryRecord(**_fields(r)) for r in run(conn, _ENTRIES, params)]
    documents = {r.name: DocumentRecord(**_fields(r)) for r in run(conn, _DOCUMENTS, params)}
    open_tasks = [task_record(r) for r in run(conn, _OPEN_TASKS, params)]
    open_ids = {t.id for t in open_tasks}
    settled_ids = sorted({i for t in open_tasks for i in (t.wait_for or [])} - open_ids)
    settled = tasks_by_ids_sync(conn, settled_ids)
    return SessionState(
        session=session,
        entries=entries,
        documents=documents,
        open_tasks=open_tasks,
        open_submissions=_open_submissions(conn, session.id),
        settled=settled,
        inbox=_unapplied_inbox(conn, session.id),
    )


def _open_submissions(conn: Connection, session_id: str) -> list[SubmissionRecord]:
    rows = run(conn, _OPEN_SUBMISSIONS, {"sid": session_id})
    return [SubmissionRecord(**_fields(r)) for r in rows]


def _unapplied_inbox(conn: Connection, session_id: str) -> list[InboxRecord]:
    rows = run(conn, _UNAPPLIED_INBOX, {"sid": session_id})
    return [InboxRecord(**_fields(r)) for r in rows]
