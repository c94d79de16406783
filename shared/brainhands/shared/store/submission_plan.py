"""A submission to write: what ``store.submissions.submit`` asks of a backend, and the
read of a submission by its request id that every way of writing it ends with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import schema
from brainhands.shared.store.draft import OutboxMessage
from brainhands.shared.store.records import OutboxRow, SubmissionRecord


@dataclass(frozen=True)
class SubmitPlan:
    """Accept ``input`` once for ``(session_id, request_id)``: the session created, if new,
    for the Brains of ``compat`` and the tenant ``tenant``; ``wake`` is the wake-up built
    for ``compat`` (a session of another key is woken by the longer way)."""

    session_id: str
    request_id: str
    input: Any
    compat: str
    wake: OutboxMessage
    tenant: str
    principal: str | None
    callback_url: str | None
    now: float


Submitted = tuple[SubmissionRecord, tuple[OutboxRow, ...]]
"""The submission as stored, and its wake-up's outbox row (none for a request id seen
before: the original, and nobody woken)."""


_BY_REQUEST = select(schema.submission).where(
    schema.submission.c.session_id == bindparam("sid"),
    schema.submission.c.request_id == bindparam("rid"),
)


def by_request_sync(conn: Connection, session_id: str, request_id: str) -> SubmissionRecord:
    row = conn.execute(_BY_REQUEST, {"sid": session_id, "rid": request_id}).one_or_none()
    if row is None:
        raise NotFoundError(f"no submission {request_id!r} in session {session_id}")
    return SubmissionRecord(**dict(row._mapping))
