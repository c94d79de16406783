"""Documents as a baseline and increments: how a write is stored and how a read folds it.

Every write of a document appends an increment -- the RFC 6902 JSON Patch from the value
before it -- to ``document_increment``, in the commit of the step that made it, under the
same version check the document's row makes (its ``version`` must still be the one the
writer read). The ``document`` row keeps the baseline: the whole value at version
``baseline``. A read gets the baseline and the increments after it, folded; a write past
``COMPACT_AFTER`` increments (or one at another version of the document's kind) rewrites the
baseline in the same commit, so a read folds a bounded number of patches however long the
history. The increments before the baseline are not read again: they stay as the document's
history (``history_sync``), shown by the view and the API, and are never pruned -- a
document is written by its session's steps, so its history grows with the session's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import jsonpatch
from sqlalchemy import BindParameter, and_, bindparam, insert, select, update
from sqlalchemy.engine import Connection

from brainhands.shared.errors import ConflictError, NotFoundError, StoreError
from brainhands.shared.store import schema
from brainhands.shared.store.draft import DocumentWrite
from brainhands.shared.store.hot import hot, run
from brainhands.shared.store.records import (
    JSON,
    DocumentHistory,
    DocumentIncrement,
    DocumentRecord,
)

_d, _i = schema.document, schema.document_increment
_SID: BindParameter[str] = bindparam("sid")
_NAME: BindParameter[str] = bindparam("name")
DOCUMENT_COLUMNS = (
    _d.c.session_id,
    _d.c.name,
    _d.c.version,
    _d.c.body,
    _d.c.kind_version,
    _d.c.baseline,
)
DOCUMENTS = hot(select(*DOCUMENT_COLUMNS).where(_d.c.session_id == _SID))
"""A session's document rows (``:sid``): each one's baseline."""
_AFTER_BASELINE = and_(
    _d.c.session_id == _i.c.session_id, _d.c.name == _i.c.name, _i.c.version > _d.c.baseline
)
INCREMENTS = hot(
    select(_i.c.session_id, _i.c.name, _i.c.patch)
    .select_from(_i.join(_d, _AFTER_BASELINE))
    .where(_i.c.session_id == _SID)
    .order_by(_i.c.name, _i.c.version)
)
"""The increments of a session's documents (``:sid``) after their baselines, in order."""
_INSERT_INCREMENTS = hot(insert(_i))
_DOCUMENT = hot(select(*DOCUMENT_COLUMNS).where(_d.c.session_id == _SID, _d.c.name == _NAME))
_HISTORY = hot(
    select(_i.c.version, _i.c.patch, _i.c.kind_version, _i.c.at)
    .where(_i.c.session_id == _SID, _i.c.name == _NAME)
    .order_by(_i.c.version.desc())
    .limit(bindparam("limit"))
)


def folded(
    name: str,
    version: int,
    body: JSON,
    kind_version: int | None,
    baseline: int,
    patches: Sequence[JSON],
) -> DocumentRecord:
    """The document whose baseline (``body`` at version ``baseline``) is followed by
    ``patches``, the increments after it, in order. A row ahead of its baseline with no
    increments after it was written whole by a build that writes none (one older than
    increments, in a rolling upgrade): its ``body`` is the value at ``version``, and its
    baseline is not known (the next write rewrites it)."""
    if not patches and version != baseline:
        return DocumentRecord(name, version, body, kind_version, None)
    if len(patches) != version - baseline:
        raise StoreError(
            f"document {name!r} is at version {version} with {len(patches)} increments "
            f"after its baseline {baseline}: its history is incomplete"
        )
    for patch in patches:
        body = jsonpatch.apply_patch(body, patch)
    return DocumentRecord(name, version, body, kind_version, baseline)


def fold_rows(rows: Iterable[Any], increments: Iterable[Any]) -> dict[str, DocumentRecord]:
    """The documents, by name, of a session's ``DOCUMENTS`` rows and ``INCREMENTS`` rows."""
    patches: dict[str, list[JSON]] = {}
    for inc in increments:
        patches.setdefault(inc.name, []).append(inc.patch)
    return {
        r.name: folded(
            r.name, r.version, r.body, r.kind_version, r.baseline, patches.get(r.name, ())
        )
        for r in rows
    }


def conflict(write: DocumentWrite, session_id: str) -> str:
    """The refusal of ``write`` when the document is no longer at the version it read."""
    read = write.expected_version
    return f"document {write.name!r} of session {session_id} is not at version {read}"


def write_documents_sync(
    conn: Connection, session_id: str, writes: Sequence[DocumentWrite], now: float
) -> None:
    """Apply ``writes`` in the caller's transaction, in order: each document's row (created,
    or moved to the next version if still at the one read, its baseline rewritten if
    ``rebase``), then their increments (one statement). ``ConflictError`` if a document is
    not at the version read."""
    if not writes:
        return
    for write in writes:
        version = write.version
        if write.expected_version is None:
            conn.execute(
                insert(_d).values(
                    session_id=session_id,
                    name=write.name,
                    version=version,
                    body=write.body,
                    updated_at=now,
                    baseline=version,
                    kind_version=write.kind_version,
                )
            )
            continue
        values: dict[str, Any] = {"version": version, "updated_at": now}
        if write.rebase:
            values.update(body=write.body, baseline=version, kind_version=write.kind_version)
        done = conn.execute(
            update(_d)
            .where(
                _d.c.session_id == session_id,
                _d.c.name == write.name,
                _d.c.version == write.expected_version,
            )
            .values(values)
        )
        if done.rowcount != 1:
            raise ConflictError(conflict(write, session_id))
    run(
        conn,
        _INSERT_INCREMENTS,
        [
            {
                "session_id": session_id,
                "name": w.name,
                "version": w.version,
                "patch": w.increment,
                "kind_version": w.kind_version,
                "at": now,
            }
            for w in writes
        ],
    )


def history_sync(conn: Connection, session_id: str, name: str, limit: int) -> DocumentHistory:
    """Document ``name`` of ``session_id`` (``NotFoundError`` if it has none) and its latest
    ``limit`` increments, oldest first."""
    params = {"sid": session_id, "name": name}
    row = run(conn, _DOCUMENT, params).one_or_none()
    if row is None:
        raise NotFoundError(f"session {session_id} has no document {name!r}")
    increments = [
        DocumentIncrement(r.version, r.patch, r.kind_version, r.at)
        for r in run(conn, _HISTORY, {**params, "limit": limit})
    ]
    increments.reverse()
    after = [i.patch for i in increments if i.version > row.baseline]
    if len(after) < row.version - row.baseline:  # more after the baseline than asked for
        after = [r.patch for r in run(conn, INCREMENTS, {"sid": session_id}) if r.name == name]
    document = folded(row.name, row.version, row.body, row.kind_version, row.baseline, after)
    return DocumentHistory(document, increments)
