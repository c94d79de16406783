"""Reading a session back: a fixed number of queries, whatever its size.

One query per row kind (session, entries, documents, open tasks, open submissions, inbox
requests not yet applied; for a claim, the operations its waiting tool calls refer to), so a
Brain rebuilds a consistent context after a restart without N+1 reads; on PostgreSQL the row
kinds after the session's are one statement (each kind aggregated as JSON), in one snapshot
and one round trip. Plus, only when open tasks wait for tasks already settled, one query for
those rows.

The operations a Brain reads come with their results: a result stored as a blob is joined
in by the same query (an outer join on the blob's key, so operations without one cost
nothing more) and decoded into ``result``.

``claim_sessions_sync`` is what a Brain runs when it takes sessions: the fence claims, then
the reads (on PostgreSQL, each session's claim and reads are one statement). A Brain that
still holds a session's state from its last pass, at the version the claim returns,
re-reads only what can change without a new version: the open submissions, the inbox and
the operations its waiting tool calls refer to.

The statements are built once, with bind parameters, and run on a sync connection: the
caller runs the whole transaction in one greenlet (or one worker thread on SQLite).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    BindParameter,
    Boolean,
    Integer,
    Row,
    String,
    bindparam,
    column,
    or_,
    select,
    text,
)
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
_R = TypeVar("_R")
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
# The operations the session's waiting tool calls refer to, each with its result blob (an
# outer join on the blob's key, so operations without one cost nothing more).
_WAITED_OPERATIONS = hot(
    select(_t.c.session_id.label("claimed_for"), _o, _b.c.data.label("result_blob"))
    .select_from(
        _t.join(_o, _o.c.operation_id == _t.c.operation_id).outerjoin(_b, _b.c.id == _o.c.blob_id)
    )
    .where(_t.c.session_id == _SID, _t.c.status == "waiting")
)


def _rows_object(whole: str, ops: str) -> str:
    """PostgreSQL: what _ENTRIES, _DOCUMENTS, _OPEN_TASKS, _OPEN_SUBMISSIONS, _UNAPPLIED_INBOX
    and _WAITED_OPERATIONS read for session ``:sid``, in their orders, as one JSON object (a
    table's row aggregates to the object of its columns), decoded by the driver. Unless the
    SQL condition ``whole`` holds, only the arrivals (submissions, inbox); unless ``ops``
    does, no operations: the other kinds' subqueries are not run."""
    return f"""json_build_object(
  'entries', CASE WHEN {whole} THEN (SELECT coalesce(json_agg(
      json_build_array(e.seq, e.kind, e.body, e.created_at) ORDER BY e.seq), '[]')
      FROM {_e.name} e WHERE e.session_id = :sid) END,
  'documents', CASE WHEN {whole} THEN (SELECT coalesce(json_agg(
      json_build_array(d.name, d.version, d.body)), '[]')
      FROM {_d.name} d WHERE d.session_id = :sid) END,
  'tasks', CASE WHEN {whole} THEN (SELECT coalesce(json_agg(t ORDER BY t.created_at, t.id), '[]')
      FROM {_t.name} t WHERE t.session_id = :sid AND t.status != 'terminal') END,
  'submissions', (SELECT coalesce(json_agg(s ORDER BY s.created_at, s.id), '[]')
      FROM {_sub.name} s WHERE s.session_id = :sid
      AND s.status IN ({", ".join(f"'{status}'" for status in OPEN_SUBMISSION_STATUSES)})),
  'inbox', (SELECT coalesce(json_agg(i ORDER BY i.id), '[]')
      FROM {_i.name} i WHERE i.session_id = :sid AND i.applied_at IS NULL),
  'operations', CASE WHEN {ops} THEN (SELECT coalesce(json_agg(
      json_build_array(o, convert_from(b.data, 'UTF8')::json)), '[]')
      FROM {_t.name} w JOIN {_o.name} o ON o.operation_id = w.operation_id
      LEFT JOIN {_b.name} b ON b.id = o.blob_id
      WHERE w.session_id = :sid AND w.status = 'waiting') END
)"""


# One statement instead of six: the rows of session ``:sid`` (all of them with ``whole``,
# with the waited-for operations with ``ops``).
_WHOLE = hot(
    text(f"SELECT CAST(:sid AS VARCHAR) AS session_id, {_rows_object(':whole', ':ops')} AS rows")
    .bindparams(bindparam("whole", type_=Boolean), bindparam("ops", type_=Boolean))
    .columns(session_id=String, rows=JSON)
)
_SESSION_KEYS = tuple(c.name for c in _s.c)
_SESSION_COLUMNS = ", ".join(_SESSION_KEYS)
# A Brain's claim of a session on PostgreSQL, one statement: the fence claim (``fence``'s
# _CLAIM_SESSION), and the rows with their waited-for operations -- all of them unless the
# session is still at version ``:known``, the state the Brain kept. The rows are read in the
# statement's snapshot, taken before the claim waited for the session's row lock, if it did:
# ``seen_version`` is the version in that snapshot, which differs from the claimed row's when
# a commit came in between (the rows are then read again).
_CLAIM = hot(
    text(
        f"""WITH f AS (UPDATE {_s.name} SET fence = :token WHERE id = :sid AND fence < :token
  RETURNING {_SESSION_COLUMNS})
SELECT f.*, (SELECT s.version FROM {_s.name} s WHERE s.id = :sid) AS seen_version,
  {_rows_object("f.version IS DISTINCT FROM :known", "TRUE")} AS rows FROM f"""
    )
    .bindparams(bindparam("token", type_=_s.c.fence.type), bindparam("known", type_=Integer))
    .columns(*(column(c.name, c.type) for c in _s.c), column("seen_version", Integer), rows=JSON)
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


def submission_record(row: Row[Any]) -> SubmissionRecord:
    return SubmissionRecord(**_fields(row))


def inbox_record(row: Row[Any]) -> InboxRecord:
    return InboxRecord(**_fields(row))


def operation_record(row: Row[Any]) -> OperationRecord:
    return OperationRecord(**_fields(row))


def _with_result(fields: dict[str, Any], blob: Any) -> OperationRecord:
    """An operation's record from its columns and its result blob's JSON, if it has one."""
    if blob is not None:
        fields["result"] = blob
    return OperationRecord(**fields)


def _waited_operation(row: Row[Any]) -> OperationRecord:
    fields = _fields(row)
    del fields["claimed_for"]
    blob = fields.pop("result_blob")
    return _with_result(fields, None if blob is None else json.loads(blob))


def load_session_sync(conn: Connection, session_id: str) -> SessionState:
    """Everything a Brain needs to continue ``session_id``: the session, its rows (one
    statement on PostgreSQL, five on SQLite), and the settled tasks its waits refer to."""
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


def claim_sessions_sync(
    conn: Connection, claims: Sequence[SessionClaim]
) -> list[ClaimedSession | BaseException]:
    """Raise each claimed session's fence to its token and read what the holder needs.

    A claim's ``known`` state is reused when the session is still at its version, with its
    open submissions, inbox and waited-for operations read again; other sessions are read
    whole. Each read is one statement for every session of the batch (pipelined on
    PostgreSQL), so a batch costs what one claim costs. On PostgreSQL the fence claim and
    the rows with the operations are one statement (``_CLAIM``), then the settled tasks waits
    refer to, if any: two round trips at most, three for a claim that waited for a commit
    (nine on SQLite).
    Returns, per claim, what was read or why the claim was refused: ``StaleLeaseError``
    (with the stored fence) when the token is not above the fence, ``NotFoundError`` for an
    unknown session.
    """
    pairs = [(c.session_id, c.token) for c in claims]
    read: dict[str, _Rows] = {}
    if conn.dialect.name == "postgresql":
        params = [
            {
                "sid": c.session_id,
                "token": c.token,
                "known": None if c.known is None else c.known.session.version,
            }
            for c in claims
        ]
        found = run(conn, _CLAIM, params[0] if len(params) == 1 else params).all()
        rows = fence.session_claims(conn, pairs, found)
        # A commit between the statement's snapshot and its claim: read those rows again.
        read = {r.id: _parse_rows(r.rows) for r in found if r.seen_version == r.version}
    else:
        rows = fence.claim_session_fences(conn, pairs)
    claimed = {
        i: SessionRecord(**{k: getattr(row, k) for k in _SESSION_KEYS})
        for i, row in enumerate(rows)
        if not isinstance(row, BaseException)
    }

    def reusable(i: int) -> SessionState | None:
        known = claims[i].known
        return known if known is not None and known.session.version == claimed[i].version else None

    whole = [claimed[i] for i in claimed if reusable(i) is None]
    # Requests and outcomes arrive without a commit (no new version): read them again too.
    again = [claimed[i].id for i in claimed if reusable(i) is not None]
    states = _read_states(conn, whole, arrivals_too=again, operations=True, read=read)
    for i, session in claimed.items():
        known = reusable(i)
        if known is not None:
            submissions, inbox = states.arrivals(session.id)
            states[session.id] = dataclasses.replace(
                known, session=session, open_submissions=submissions, inbox=inbox
            )
    return [
        row
        if isinstance(row, BaseException)
        else ClaimedSession(states[claimed[i].id], states.operations(claimed[i].id))
        for i, row in enumerate(rows)
    ]


def arrivals_sync(
    conn: Connection, asks: Sequence[tuple[str, bool]]
) -> list[tuple[list[InboxRecord], list[SubmissionRecord]]]:
    """What reached each session of ``asks`` (a session id, and whether its waiting
    submissions are wanted too) without a commit: its inbox requests not applied yet, and
    its submissions waiting for their turn, oldest first. Read for every session asked
    about at once (one statement on PostgreSQL, one per kind on SQLite): what holders look at
    again in the middle of their passes."""
    rows = _read_rows(conn)(conn, [], list(dict.fromkeys(sid for sid, _ in asks)), False)
    return [
        (
            rows[sid].inbox,
            [r for r in rows[sid].submissions if r.status == "queued"] if wanted else [],
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
        found[row.operation_id] = _with_result(fields, None if blob is None else json.loads(blob))
    return found


class _States(dict[str, SessionState]):
    """Sessions' states by id, and the rows read for each (``_Rows``)."""

    def __init__(self, rows: dict[str, _Rows]) -> None:
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
class _Rows:
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
    sessions: list[SessionRecord],
    *,
    arrivals_too: Sequence[str] = (),
    operations: bool = False,
    read: dict[str, _Rows] | None = None,
) -> _States:
    """The whole state of each of ``sessions``, and the arrivals of ``arrivals_too`` as
    well (with the operations their waiting calls refer to, if ``operations``): one
    statement per row kind for all of them (on PostgreSQL, one statement). The rows of
    ``read`` (by session, read as asked) are not read again."""
    sids = [s.id for s in sessions]
    read = read or {}
    rows = _read_rows(conn)(
        conn,
        [sid for sid in sids if sid not in read],
        [sid for sid in arrivals_too if sid not in read],
        operations,
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


def _read_rows(
    conn: Connection,
) -> Callable[[Connection, list[str], Sequence[str], bool], dict[str, _Rows]]:
    """How ``conn``'s backend reads sessions' rows: one statement, or one per row kind."""
    return _rows_as_json if conn.dialect.name == "postgresql" else _rows_by_kind


def _rows_by_kind(
    conn: Connection, sids: list[str], arrivals_too: Sequence[str], operations: bool
) -> dict[str, _Rows]:
    """The rows of ``sids`` and the arrivals of ``arrivals_too`` (and of both, the waited-for
    operations if ``operations``): a statement per kind."""
    arrived = [*sids, *arrivals_too]
    submissions = _per_session(conn, _OPEN_SUBMISSIONS, arrived, submission_record)
    inbox = _per_session(conn, _UNAPPLIED_INBOX, arrived, inbox_record)
    entries = _per_session(
        conn, _ENTRIES, sids, lambda r: EntryRecord(r.seq, r.kind, r.body, r.created_at)
    )
    documents = _per_session(
        conn, _DOCUMENTS, sids, lambda r: DocumentRecord(r.name, r.version, r.body)
    )
    tasks = _per_session(conn, _OPEN_TASKS, sids, task_record)
    found = {sid: _Rows(submissions[sid], inbox[sid]) for sid in arrived}
    if operations:
        waited = _per_session(conn, _WAITED_OPERATIONS, arrived, _waited_operation, "claimed_for")
        for sid in arrived:
            found[sid].operations = {o.operation_id: o for o in waited[sid]}
    for sid in sids:
        found[sid].entries = entries[sid]
        found[sid].documents = {d.name: d for d in documents[sid]}
        found[sid].tasks = tasks[sid]
    return found


def _rows_as_json(
    conn: Connection, sids: list[str], arrivals_too: Sequence[str], operations: bool
) -> dict[str, _Rows]:
    """The rows of ``sids`` and the arrivals of ``arrivals_too`` (and of both, the waited-for
    operations if ``operations``): one statement for all."""
    params = [{"sid": s, "whole": True, "ops": operations} for s in sids]
    params += [{"sid": s, "whole": False, "ops": operations} for s in arrivals_too]
    if not params:
        return {}
    return {
        row.session_id: _parse_rows(row.rows)
        for row in run(conn, _WHOLE, params[0] if len(params) == 1 else params)
    }


def _parse_rows(rows: dict[str, Any]) -> _Rows:
    """The records in the JSON object of one session's rows (``_rows_object``)."""
    return _Rows(
        [SubmissionRecord(**r) for r in rows["submissions"]],
        [InboxRecord(**r) for r in rows["inbox"]],
        [EntryRecord(*e) for e in rows["entries"] or ()],
        {d[0]: DocumentRecord(*d) for d in rows["documents"] or ()},
        [TaskRecord(**t) for t in rows["tasks"] or ()],
        {o["operation_id"]: _with_result(o, blob) for o, blob in rows["operations"] or ()},
    )


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
