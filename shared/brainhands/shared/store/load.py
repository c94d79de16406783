"""Reading a session back: a fixed number of queries, whatever its size.

One query per row kind (session, entries, documents and the increments after their
baselines -- folded: ``documents`` --, open tasks, open submissions, inbox requests not yet
applied; for a claim, the operations its waiting tool calls refer to), so a Brain rebuilds
a consistent context after a restart without N+1 reads; on PostgreSQL the row kinds after
the session's are one statement (each kind aggregated as JSON), in one snapshot and one
round trip. Plus, only when open tasks wait for tasks already settled, one query for
those rows.

The operations a Brain reads come with their results: a result stored as a blob is joined
in by the same query (an outer join on the blob's key, so operations without one cost
nothing more) and decoded into ``result``.

``claim_sessions_sync`` is what a Brain runs when it takes sessions: the fence claims, then
the reads (on PostgreSQL, each session's claim and reads are one statement). A Brain that
still holds a session's state from its last pass, at the version the claim returns,
re-reads only what can change without a new version: the open submissions, the inbox and
the operations its waiting tool calls refer to.

A claim reads a session's entries from its latest checkpoint on (``CHECKPOINT_KIND``, the
context folded so far: ``brainhands.brain.context``; found by the partial index
``ix_entry_checkpoint``), so a pass costs what the context costs, not the history. Whoever
shows history (``load_session_sync``: the view, the API, ``brainhands show``) reads it all.

The statements are built once, with bind parameters, and run on a sync connection: the
caller runs the whole transaction in one greenlet (or one worker thread on SQLite).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy import BindParameter, Row, bindparam, func, literal_column, or_, select
from sqlalchemy.engine import Connection

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import fence, schema
from brainhands.shared.store.documents import DOCUMENTS, INCREMENTS, fold_rows
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
    known,
)

_s, _e, _t, _sub, _o, _b, _i = (
    schema.session,
    schema.entry,
    schema.task,
    schema.submission,
    schema.operation,
    schema.blob,
    schema.inbox,
)
_R = TypeVar("_R")
_SID: BindParameter[str] = bindparam("sid")
_IDS: BindParameter[list[str]] = bindparam("ids", expanding=True)
_SESSION = hot(select(_s).where(_s.c.id == _SID))
CHECKPOINT_KIND = "checkpoint"
"""The kind of the entries that hold a session's context folded so far: a Brain's claim
reads the entries from the latest one on."""
_ENTRY_COLUMNS = (_e.c.session_id, _e.c.seq, _e.c.kind, _e.c.body, _e.c.created_at)
_ENTRIES = hot(select(*_ENTRY_COLUMNS).where(_e.c.session_id == _SID).order_by(_e.c.seq))
_checkpoint = _e.alias("checkpoint")
# The kind as a literal, not a bind parameter: only then may a planner (PostgreSQL's generic
# plans too) read it from the partial index ix_entry_checkpoint.
_LATEST_CHECKPOINT = (
    select(func.max(_checkpoint.c.seq))
    .where(
        _checkpoint.c.session_id == _SID,
        _checkpoint.c.kind == literal_column(f"'{CHECKPOINT_KIND}'"),
    )
    .scalar_subquery()
)
_CONTEXT_ENTRIES = hot(
    select(*_ENTRY_COLUMNS)
    .where(_e.c.session_id == _SID, _e.c.seq >= func.coalesce(_LATEST_CHECKPOINT, 0))
    .order_by(_e.c.seq)
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
# The operations the session's waiting tool calls refer to, each with its result blob (an
# outer join on the blob's key, so operations without one cost nothing more).
_WAITED_OPERATIONS = hot(
    select(_t.c.session_id.label("claimed_for"), _o, _b.c.data.label("result_blob"))
    .select_from(
        _t.join(_o, _o.c.operation_id == _t.c.operation_id).outerjoin(_b, _b.c.id == _o.c.blob_id)
    )
    .where(_t.c.session_id == _SID, _t.c.status == "waiting")
)


SESSION_KEYS = tuple(c.name for c in _s.c)
"""The session row's columns, in order."""
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


def submission_record(row: Row[Any]) -> SubmissionRecord:
    return SubmissionRecord(**_fields(row))


def inbox_record(row: Row[Any]) -> InboxRecord:
    return InboxRecord(**_fields(row))


def operation_record(row: Row[Any]) -> OperationRecord:
    return OperationRecord(**_fields(row))


def operation_with_result(fields: dict[str, Any], blob: Any) -> OperationRecord:
    """An operation's record from its columns and its result blob's JSON, if it has one."""
    if blob is not None:
        fields["result"] = blob
    return known(OperationRecord, fields)


def _waited_operation(row: Row[Any]) -> OperationRecord:
    fields = _fields(row)
    del fields["claimed_for"]
    blob = fields.pop("result_blob")
    return operation_with_result(fields, None if blob is None else json.loads(blob))


class ReadRows(Protocol):
    """The rows of ``sids`` and the arrivals (open submissions, unapplied inbox) of
    ``arrivals_too``; with ``operations``, of both the operations their waiting tool calls
    refer to; the entries all with ``history``, else from the latest checkpoint on."""

    def __call__(
        self,
        conn: Connection,
        sids: list[str],
        arrivals_too: Sequence[str],
        operations: bool,
        *,
        history: bool = True,
    ) -> dict[str, SessionRows]: ...


@dataclass(frozen=True)
class RowReader:
    """How a backend reads sessions' rows (``backends``): ``ROWS_BY_KIND`` is SQL every
    database runs; PostgreSQL reads them all in one statement (``ROWS_AS_JSON``)."""

    read: ReadRows
    claim: Callable[[Connection, Sequence[SessionClaim]], tuple[list[Any], dict[str, SessionRows]]]
    """``claim(conn, claims)``: the fence claims of ``claims`` (per claim: the session's row
    as claimed, or the error that refused it), and the rows already read with them, by
    session; the entries, as a Brain reads them, from the latest checkpoint on."""


def load_session_sync(conn: Connection, session_id: str, rows: RowReader) -> SessionState:
    """Everything a Brain needs to continue ``session_id``: the session, its rows (one
    statement on PostgreSQL, six on SQLite; every entry), and the settled tasks its waits
    refer to."""
    row = run(conn, _SESSION, {"sid": session_id}).one_or_none()
    if row is None:
        raise NotFoundError(f"session {session_id} does not exist")
    session = SessionRecord(**_fields(row))
    return _read_states(conn, rows, [session])[session.id]


@dataclass(frozen=True)
class SessionClaim:
    """A Brain's claim of a session for a lease token (``claim_sessions_sync``)."""

    session_id: str
    token: int
    known: SessionState | None = None
    """The state the Brain kept from an earlier pass, reused if still at its version."""
    defer: bool = False
    """Only check the fence (below the token), leaving the claim to the holder's first
    commit: its lease was handed over (``Lease.handed_over``)."""


def claim_sessions_sync(
    conn: Connection, claims: Sequence[SessionClaim], rows: RowReader
) -> list[ClaimedSession | BaseException]:
    """Raise each claimed session's fence to its token and read what the holder needs.

    A claim's ``known`` state is reused when the session is still at its version, with its
    open submissions, inbox and waited-for operations read again; other sessions are read
    whole. Each read is one statement for every session of the batch (pipelined on
    PostgreSQL), so a batch costs what one claim costs. On PostgreSQL the fence claim and
    the rows with the operations are one statement (``_CLAIM``), then the settled tasks waits
    refer to, if any: two round trips at most, three for a claim that waited for a commit
    (ten on SQLite), one more for a batch with both deferred claims and others.
    Returns, per claim, what was read or why the claim was refused: ``StaleLeaseError``
    (with the stored fence) when the token is not above the fence, ``NotFoundError`` for an
    unknown session.
    """
    fences, read = rows.claim(conn, claims)
    claimed = {
        i: SessionRecord(**{k: getattr(row, k) for k in SESSION_KEYS})
        for i, row in enumerate(fences)
        if not isinstance(row, BaseException)
    }

    def reusable(i: int) -> SessionState | None:
        known = claims[i].known
        return known if known is not None and known.session.version == claimed[i].version else None

    whole = [claimed[i] for i in claimed if reusable(i) is None]
    # Requests and outcomes arrive without a commit (no new version): read them again too.
    again = [claimed[i].id for i in claimed if reusable(i) is not None]
    states = _read_states(
        conn, rows, whole, arrivals_too=again, operations=True, read=read, history=False
    )
    for i, session in claimed.items():
        known = reusable(i)
        if known is not None:
            submissions, inbox = states.arrivals(session.id)
            states[session.id] = dataclasses.replace(
                known,
                session=session,
                entries=since_checkpoint(known.entries),
                open_submissions=submissions,
                inbox=inbox,
            )
    return [
        row
        if isinstance(row, BaseException)
        else ClaimedSession(states[claimed[i].id], states.operations(claimed[i].id))
        for i, row in enumerate(fences)
    ]


def since_checkpoint(entries: list[EntryRecord]) -> list[EntryRecord]:
    """``entries`` from the latest checkpoint on (all if none is one): what a claim reads,
    cut from a state kept from an earlier pass, which may have appended a checkpoint."""
    for i in range(len(entries) - 1, -1, -1):
        if entries[i].kind == CHECKPOINT_KIND:
            return entries[i:] if i else entries
    return entries


def arrivals_sync(
    conn: Connection, asks: Sequence[tuple[str, bool]], rows: RowReader
) -> list[tuple[list[InboxRecord], list[SubmissionRecord]]]:
    """What reached each session of ``asks`` (a session id, and whether its waiting
    submissions are wanted too) without a commit: its inbox requests not applied yet, and
    its submissions waiting for their turn, oldest first. Read for every session asked
    about at once (one statement on PostgreSQL, one per kind on SQLite): what holders look at
    again in the middle of their passes."""
    found = rows.read(conn, [], list(dict.fromkeys(sid for sid, _ in asks)), False)
    return [
        (
            found[sid].inbox,
            [r for r in found[sid].submissions if r.status == "queued"] if wanted else [],
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
        found[row.operation_id] = operation_with_result(
            fields, None if blob is None else json.loads(blob)
        )
    return found


class _States(dict[str, SessionState]):
    """Sessions' states by id, and the rows read for each (``SessionRows``)."""

    def __init__(self, rows: dict[str, SessionRows]) -> None:
        super().__init__()
        self._rows = rows

    def arrivals(self, session_id: str) -> tuple[list[SubmissionRecord], list[InboxRecord]]:
        """The open submissions and the unapplied inbox read for ``session_id``."""
        found = self._rows[session_id]
        return found.submissions, found.inbox

    def operations(self, session_id: str) -> dict[str, OperationRecord]:
        """The operations ``session_id``'s waiting tool calls refer to, by id."""
        return self._rows[session_id].operations


@dataclass
class SessionRows:
    """The rows of one session read besides its session row: all its kinds for a whole
    read; only submissions and inbox for a read of its arrivals."""

    submissions: list[SubmissionRecord]
    inbox: list[InboxRecord]
    entries: list[EntryRecord] = dataclasses.field(default_factory=list)
    documents: dict[str, DocumentRecord] = dataclasses.field(default_factory=dict)
    tasks: list[TaskRecord] = dataclasses.field(default_factory=list)
    operations: dict[str, OperationRecord] = dataclasses.field(default_factory=dict)
    """The operations its waiting tool calls refer to, by id (when asked for)."""


def _read_states(
    conn: Connection,
    reader: RowReader,
    sessions: list[SessionRecord],
    *,
    arrivals_too: Sequence[str] = (),
    operations: bool = False,
    read: dict[str, SessionRows] | None = None,
    history: bool = True,
) -> _States:
    """The whole state of each of ``sessions``, and the arrivals of ``arrivals_too`` as
    well (with the operations their waiting calls refer to, if ``operations``): one
    statement per row kind for all of them (on PostgreSQL, one statement). The rows of
    ``read`` (by session, read as asked) are not read again (``history``: see ``ReadRows``)."""
    sids = [s.id for s in sessions]
    read = read or {}
    rows = reader.read(
        conn,
        [sid for sid in sids if sid not in read],
        [sid for sid in arrivals_too if sid not in read],
        operations,
        history=history,
    )
    rows.update(read)
    waited = {
        sid: sorted(
            {i for t in rows[sid].tasks for i in (t.wait_for or [])}
            - {t.id for t in rows[sid].tasks}
        )
        for sid in sids
    }
    settled = tasks_by_ids_sync(conn, sorted({i for ids in waited.values() for i in ids}))
    states = _States(rows)
    for session in sessions:
        found = rows[session.id]
        states[session.id] = SessionState(
            session=session,
            entries=found.entries,
            documents=found.documents,
            open_tasks=found.tasks,
            open_submissions=found.submissions,
            settled={i: settled[i] for i in waited[session.id] if i in settled},
            inbox=found.inbox,
        )
    return states


def _rows_by_kind(
    conn: Connection,
    sids: list[str],
    arrivals_too: Sequence[str],
    operations: bool,
    *,
    history: bool = True,
) -> dict[str, SessionRows]:
    """The rows of ``sids`` and the arrivals of ``arrivals_too`` (and of both, the waited-for
    operations if ``operations``): a statement per kind."""
    arrived = [*sids, *arrivals_too]
    submissions = _per_session(conn, _OPEN_SUBMISSIONS, arrived, submission_record)
    inbox = _per_session(conn, _UNAPPLIED_INBOX, arrived, inbox_record)
    read_entries = _ENTRIES if history else _CONTEXT_ENTRIES
    entries = _per_session(
        conn, read_entries, sids, lambda r: EntryRecord(r.seq, r.kind, r.body, r.created_at)
    )
    documents = _per_session(conn, DOCUMENTS, sids, lambda r: r)
    increments = _per_session(conn, INCREMENTS, sids, lambda r: r)
    tasks = _per_session(conn, _OPEN_TASKS, sids, task_record)
    found = {sid: SessionRows(submissions[sid], inbox[sid]) for sid in arrived}
    if operations:
        waited = _per_session(conn, _WAITED_OPERATIONS, arrived, _waited_operation, "claimed_for")
        for sid in arrived:
            found[sid].operations = {o.operation_id: o for o in waited[sid]}
    for sid in sids:
        found[sid].entries = entries[sid]
        found[sid].documents = fold_rows(documents[sid], increments[sid])
        found[sid].tasks = tasks[sid]
    return found


def _claim_fences(
    conn: Connection, claims: Sequence[SessionClaim]
) -> tuple[list[Any], dict[str, SessionRows]]:
    pairs = [(c.session_id, c.token) for c in claims]
    return fence.claim_session_fences(conn, pairs, defer=[c.defer for c in claims]), {}


ROWS_BY_KIND = RowReader(read=_rows_by_kind, claim=_claim_fences)
"""Sessions' rows read by one statement per row kind (for each, pipelined for all the
sessions where the backend pipelines), claims by one statement: SQL every database runs."""


def _per_session(
    conn: Connection,
    statement: HotStatement,
    session_ids: Sequence[str],
    record: Callable[[Any], _R],
    by: str = "session_id",
) -> dict[str, list[_R]]:
    """``record`` of each row ``statement`` (bound by ``sid``) reads for each of
    ``session_ids``, all in one round trip where the backend pipelines, by session (its
    column ``by``; in the statement's order)."""
    found: dict[str, list[_R]] = {sid: [] for sid in session_ids}
    if not session_ids:
        return found
    params = [{"sid": sid} for sid in session_ids]
    for row in run(conn, statement, params[0] if len(params) == 1 else params):
        found[getattr(row, by)].append(record(row))
    return found
