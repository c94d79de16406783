"""PostgreSQL reads sessions' rows in one statement: every row kind of every session asked
for, each kind aggregated as JSON, in one snapshot and one round trip; a Brain's claim of a
session is one statement too (the fence claim and the rows). ``load`` assembles the states
from what these return, as it does from the one-statement-per-kind reads of any database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import JSON, Boolean, Integer, String, bindparam, column, text
from sqlalchemy.engine import Connection

from brainhands.shared.store import fence
from brainhands.shared.store.documents import folded
from brainhands.shared.store.hot import hot, run
from brainhands.shared.store.load import (
    CHECKPOINT_KIND,
    SESSION_KEYS,
    RowReader,
    SessionClaim,
    SessionRows,
    operation_with_result,
)
from brainhands.shared.store.records import (
    OPEN_SUBMISSION_STATUSES,
    EntryRecord,
    InboxRecord,
    SubmissionRecord,
    TaskRecord,
    known,
)
from brainhands.shared.store.schema import (
    blob,
    document,
    document_increment,
    entry,
    inbox,
    operation,
    session,
    submission,
    task,
)


def _rows_object(whole: str, ops: str, history: str) -> str:
    """PostgreSQL: what _ENTRIES (or _CONTEXT_ENTRIES), _DOCUMENTS, _OPEN_TASKS,
    _OPEN_SUBMISSIONS, _UNAPPLIED_INBOX and _WAITED_OPERATIONS read for session ``:sid``, in
    their orders, as one JSON object (a table's row aggregates to the object of its columns),
    decoded by the driver; a document comes with the patches after its baseline, to fold
    (``documents``). Unless the SQL condition ``whole`` holds, only the arrivals
    (submissions, inbox); unless ``ops`` does, no operations: the other kinds' subqueries
    are not run. Unless ``history`` does, the entries from the latest checkpoint on (its seq
    an init plan on the partial index ix_entry_checkpoint, the entries a range of the
    primary key's)."""
    return f"""json_build_object(
  'entries', CASE WHEN {whole} THEN (SELECT coalesce(json_agg(
      json_build_array(e.seq, e.kind, e.body, e.created_at) ORDER BY e.seq), '[]')
      FROM {entry.name} e WHERE e.session_id = :sid AND e.seq >= CASE WHEN {history} THEN 0
      ELSE coalesce((SELECT max(c.seq) FROM {entry.name} c
        WHERE c.session_id = :sid AND c.kind = '{CHECKPOINT_KIND}'), 0) END) END,
  'documents', CASE WHEN {whole} THEN (SELECT coalesce(json_agg(
      json_build_array(d.name, d.version, d.body, d.kind_version, d.baseline,
        (SELECT coalesce(json_agg(i.patch ORDER BY i.version), '[]')
          FROM {document_increment.name} i
          WHERE i.session_id = :sid AND i.name = d.name AND i.version > d.baseline))), '[]')
      FROM {document.name} d WHERE d.session_id = :sid) END,
  'tasks', CASE WHEN {whole} THEN (SELECT coalesce(json_agg(t ORDER BY t.created_at, t.id), '[]')
      FROM {task.name} t WHERE t.session_id = :sid AND t.status != 'terminal') END,
  'submissions', (SELECT coalesce(json_agg(s ORDER BY s.created_at, s.id), '[]')
      FROM {submission.name} s WHERE s.session_id = :sid
      AND s.status IN ({", ".join(f"'{status}'" for status in OPEN_SUBMISSION_STATUSES)})),
  'inbox', (SELECT coalesce(json_agg(i ORDER BY i.id), '[]')
      FROM {inbox.name} i WHERE i.session_id = :sid AND i.applied_at IS NULL),
  'operations', CASE WHEN {ops} THEN (SELECT coalesce(json_agg(
      json_build_array(o, convert_from(b.data, 'UTF8')::json)), '[]')
      FROM {task.name} w JOIN {operation.name} o ON o.operation_id = w.operation_id
      LEFT JOIN {blob.name} b ON b.id = o.blob_id
      WHERE w.session_id = :sid AND w.status = 'waiting') END
)"""


# One statement instead of six: the rows of session ``:sid`` (all of them with ``whole``,
# with the waited-for operations with ``ops``, every entry with ``history``).
_WHOLE = hot(
    text(
        "SELECT CAST(:sid AS VARCHAR) AS session_id, "
        f"{_rows_object(':whole', ':ops', ':history')} AS rows"
    )
    .bindparams(
        bindparam("whole", type_=Boolean),
        bindparam("ops", type_=Boolean),
        bindparam("history", type_=Boolean),
    )
    .columns(session_id=String, rows=JSON)
)
# A Brain's claim of a session on PostgreSQL, one statement: the fence claim (``fence``'s
# _CLAIM_SESSION), and the rows with their waited-for operations -- all of them unless the
# session is still at version ``:known``, the state the Brain kept. The rows are read in the
# statement's snapshot, taken before the claim waited for the session's row lock, if it did:
# ``seen_version`` is the version in that snapshot, which differs from the claimed row's when
# a commit came in between (the rows are then read again). A claim deferred to the holder's
# first commit (``SessionClaim.defer``) is the same statement with a check for the claim: it
# reads the row if its fence is below the token, and shows the fence as the token.
_CLAIMED = f"UPDATE {session.name} SET fence = :token WHERE id = :sid AND fence < :token RETURNING "
_CHECKED = f"SELECT * FROM {session.name} WHERE id = :sid AND fence < :token"


def _claim_statement(claimed: str) -> Any:
    fence_as_token = "CAST(:token AS BIGINT) AS fence"
    columns = ", ".join(fence_as_token if k == "fence" else f"f.{k}" for k in SESSION_KEYS)
    return hot(
        text(
            f"""WITH f AS ({claimed})
SELECT {columns}, (SELECT s.version FROM {session.name} s WHERE s.id = :sid) AS seen_version,
  {_rows_object("f.version IS DISTINCT FROM :known", "TRUE", "FALSE")} AS rows FROM f"""
        )
        .bindparams(
            bindparam("token", type_=session.c.fence.type), bindparam("known", type_=Integer)
        )
        .columns(
            *(column(c.name, c.type) for c in session.c), column("seen_version", Integer), rows=JSON
        )
    )


_CLAIM = {False: _claim_statement(_CLAIMED + "*"), True: _claim_statement(_CHECKED)}
"""By ``SessionClaim.defer``."""


def _rows_as_json(
    conn: Connection,
    sids: list[str],
    arrivals_too: Sequence[str],
    operations: bool,
    *,
    history: bool = True,
) -> dict[str, SessionRows]:
    """The rows of ``sids`` and the arrivals of ``arrivals_too`` (and of both, the waited-for
    operations if ``operations``): one statement for all; the entries all of them with
    ``history``, else from the latest checkpoint on."""
    params = [{"sid": s, "whole": True, "ops": operations, "history": history} for s in sids]
    params += [
        {"sid": s, "whole": False, "ops": operations, "history": history} for s in arrivals_too
    ]
    if not params:
        return {}
    return {
        row.session_id: _parse_rows(row.rows)
        for row in run(conn, _WHOLE, params[0] if len(params) == 1 else params)
    }


def _parse_rows(rows: dict[str, Any]) -> SessionRows:
    """The records in the JSON object of one session's rows (``_rows_object``)."""
    return SessionRows(
        [known(SubmissionRecord, r) for r in rows["submissions"]],
        [known(InboxRecord, r) for r in rows["inbox"]],
        [EntryRecord(*e) for e in rows["entries"] or ()],
        {d[0]: folded(*d) for d in rows["documents"] or ()},
        [known(TaskRecord, t) for t in rows["tasks"] or ()],
        {o["operation_id"]: operation_with_result(o, blob) for o, blob in rows["operations"] or ()},
    )


def _claim_with_rows(
    conn: Connection, claims: Sequence[SessionClaim]
) -> tuple[list[Any], dict[str, SessionRows]]:
    found = []
    for defer in (False, True):
        params = [
            {
                "sid": c.session_id,
                "token": c.token,
                "known": None if c.known is None else c.known.session.version,
            }
            for c in claims
            if c.defer is defer
        ]
        if params:
            found += run(conn, _CLAIM[defer], params[0] if len(params) == 1 else params).all()
    pairs = [(c.session_id, c.token) for c in claims]
    # A commit between the statement's snapshot and its claim: those rows are read again.
    read = {r.id: _parse_rows(r.rows) for r in found if r.seen_version == r.version}
    return fence.session_claims(conn, pairs, found), read


ROWS_AS_JSON = RowReader(read=_rows_as_json, claim=_claim_with_rows)
"""Sessions' rows by one statement for all of them (``_WHOLE``), and a claim with its
rows by one statement (``_CLAIM``)."""
