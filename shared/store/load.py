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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, Row, bindparam, or_, select
from sqlalchemy.engine import Connection

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import fence, schema
from brainhands.shared.store.hot import HotStatement, hot, run
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
    select(_e.c.session_id, _e.c.seq, _e.c.kind, _e.c.body, _e.c.created_at)
    .where(_e.c.session_id == _SID)
    .order_by(_e.c.seq)
)
_DOCUMENTS = hot(
    select(_d.c.session_id, _d.c.name, _d.c.version, _d.c.body).where(_d.c.session_id == _SID)
)
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
    session = SessionRecord(**_fields(row))
    return _read_states(conn, [session])[session.id]


@dataclass(frozen=True)
class SessionClaim:
    """A Brain's claim of a session for a lease token (``claim_sessions_sync``)."""

    session_id: str
    token: int
    known: SessionState | None = None
    """The state the Brain kept from an earlier pass, reused if still at its version."""
    submissions: bool = True
    """Whether to read the open submissions (and the inbox) again when ``known`` is reused."""


def claim_sessions_sync(
    conn: Connection, claims: Sequence[SessionClaim]
) -> list[ClaimedSession | BaseException]:
    """Raise each claimed session's fence to its token and read what the holder needs.

    A claim's ``known`` state is reused when the session is still at its version, with its
    open submissions and inbox read again (unless ``submissions`` is false: then none are
    returned); other sessions are read whole. Each read is one statement for every session
    of the batch (pipelined on PostgreSQL), so a batch costs what one claim costs: seven
    round trips at most. Returns, per claim, what was read or why the claim was refused:
    ``StaleLeaseError`` (with the stored fence) when the token is not above the fence,
    ``NotFoundError`` for an unknown session.
    """
    rows = fence.claim_session_fences(conn, [(c.session_id, c.token) for c in claims])
    claimed = {
        i: SessionRecord(**_fields(row))
        for i, row in enumerate(rows)
        if not isinstance(row, BaseException)
    }

    def reusable(i: int) -> SessionState | None:
        known = claims[i].known
        return known if known is not None and known.session.version == claimed[i].version else None

    whole = [claimed[i] for i in claimed if reusable(i) is None]
    # Requests reach the inbox without a commit (no new version): read them again too.
    again = [claimed[i].id for i in claimed if reusable(i) is not None and claims[i].submissions]
    states = _read_states(conn, whole, arrivals_too=again)
    for i, session in claimed.items():
        known = reusable(i)
        if known is not None:
            submissions, inbox = states.arrivals(session.id)
            states[session.id] = dataclasses.replace(
                known, session=session, open_submissions=submissions, inbox=inbox
            )
    waiting = {
        session.id: [
            t.operation_id
            for t in states[session.id].open_tasks
            if t.status == "waiting" and t.operation_id
        ]
        for session in claimed.values()
    }
    operations = operations_by_ids_sync(conn, sorted({o for ids in waiting.values() for o in ids}))
    out: list[ClaimedSession | BaseException] = []
    for i, row in enumerate(rows):
        if isinstance(row, BaseException):
            out.append(row)
            continue
        sid = claimed[i].id
        ops = {o: operations[o] for o in waiting[sid] if o in operations}
        read = claims[i].submissions or reusable(i) is None
        out.append(ClaimedSession(states[sid], ops, submissions_read=read))
    return out


def arrivals_sync(
    conn: Connection, asks: Sequence[tuple[str, bool]]
) -> list[tuple[list[InboxRecord], list[SubmissionRecord]]]:
    """What reached each session of ``asks`` (a session id, and whether its waiting
    submissions are wanted too) without a commit: its inbox requests not applied yet, and
    its submissions waiting for their turn, oldest first. A statement each, for every session
    asked about: what holders look at again in the middle of their passes."""
    sids = list(dict.fromkeys(sid for sid, _ in asks))
    inbox = _per_session(conn, _UNAPPLIED_INBOX, sids)
    queued = _per_session(conn, _OPEN_SUBMISSIONS, list(dict.fromkeys(s for s, q in asks if q)))
    return [
        (
            [InboxRecord(**_fields(r)) for r in inbox[sid]],
            [SubmissionRecord(**_fields(r)) for r in queued[sid] if r.status == "queued"]
            if wanted
            else [],
        )
        for sid, wanted in asks
    ]


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


class _States(dict[str, SessionState]):
    """Sessions' states by id, and the arrivals (open submissions, inbox) read for each."""

    def __init__(
        self,
        submissions: dict[str, list[SubmissionRecord]],
        inbox: dict[str, list[InboxRecord]],
    ) -> None:
        super().__init__()
        self._submissions = submissions
        self._inbox = inbox

    def arrivals(self, session_id: str) -> tuple[list[SubmissionRecord], list[InboxRecord]]:
        return self._submissions.get(session_id, []), self._inbox.get(session_id, [])


def _read_states(
    conn: Connection, sessions: list[SessionRecord], *, arrivals_too: Sequence[str] = ()
) -> _States:
    """The whole state of each of ``sessions``, and the arrivals of ``arrivals_too`` as
    well: one statement per row kind for all of them."""
    sids = [s.id for s in sessions]
    entries = _per_session(conn, _ENTRIES, sids)
    documents = _per_session(conn, _DOCUMENTS, sids)
    tasks = {
        sid: [task_record(r) for r in rows]
        for sid, rows in _per_session(conn, _OPEN_TASKS, sids).items()
    }
    waited = {
        sid: sorted(
            {i for t in open_tasks for i in (t.wait_for or [])} - {t.id for t in open_tasks}
        )
        for sid, open_tasks in tasks.items()
    }
    settled = tasks_by_ids_sync(conn, sorted({i for ids in waited.values() for i in ids}))
    arrived = [*sids, *arrivals_too]
    submissions = {
        sid: [SubmissionRecord(**_fields(r)) for r in rows]
        for sid, rows in _per_session(conn, _OPEN_SUBMISSIONS, arrived).items()
    }
    inbox = {
        sid: [InboxRecord(**_fields(r)) for r in rows]
        for sid, rows in _per_session(conn, _UNAPPLIED_INBOX, arrived).items()
    }
    states = _States(submissions, inbox)
    for session in sessions:
        sid = session.id
        states[sid] = SessionState(
            session=session,
            entries=[EntryRecord(r.seq, r.kind, r.body, r.created_at) for r in entries[sid]],
            documents={r.name: DocumentRecord(r.name, r.version, r.body) for r in documents[sid]},
            open_tasks=tasks[sid],
            open_submissions=submissions[sid],
            settled={i: settled[i] for i in waited[sid] if i in settled},
            inbox=inbox[sid],
        )
    return states


def _per_session(
    conn: Connection, statement: HotStatement, session_ids: Sequence[str]
) -> dict[str, list[Any]]:
    """The rows ``statement`` (bound by ``sid``) reads for each of ``session_ids``, all in one
    round trip where the backend pipelines, by session (in the statement's order)."""
    found: dict[str, list[Any]] = {sid: [] for sid in session_ids}
    if not session_ids:
        return found
    params = [{"sid": sid} for sid in session_ids]
    for row in run(conn, statement, params[0] if len(params) == 1 else params):
        found[row.session_id].append(row)
    return found
