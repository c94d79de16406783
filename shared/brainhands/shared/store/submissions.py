"""Accepted input: one submission per ``(session, request_id)``, however often it is sent.

Submitting needs no session lease: it inserts the submission (and the session, on first
contact) and the wake-up in one transaction, and a Brain picks the submission up from
there. Re-submitting the same request id returns the original and wakes nobody.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Insert,
    Table,
    bindparam,
    exists,
    func,
    select,
    update,
)
from sqlalchemy.engine import Connection

from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.store.commit import insert_outbox_sync
from brainhands.shared.store.details import submissions_in
from brainhands.shared.store.draft import OutboxMessage, new_id
from brainhands.shared.store.handoff import Handoff
from brainhands.shared.store.records import (
    FINAL_SUBMISSION_STATUSES,
    CommitReceipt,
    OutboxRow,
    SubmissionRecord,
)
from brainhands.shared.store.submission_plan import SubmitPlan, by_request_sync
from brainhands.shared.tenancy import split_key


@dataclass(frozen=True)
class CallbackDue:
    """A submission whose end is to be posted to its ``callback_url``."""

    id: str
    session_id: str
    request_id: str
    status: str
    answer: object
    error: str | None
    callback_url: str
    callback_attempts: int


@dataclass(frozen=True)
class SubmitReceipt:
    submission: SubmissionRecord
    created: bool
    """False when the request id was seen before: nothing new was started."""


@dataclass(frozen=True)
class _Inserts:
    session: Insert
    submission: Insert


@functools.cache
def _inserts(insert: Callable[[Table], Any]) -> _Inserts:
    """A dialect's ``INSERT ... ON CONFLICT DO NOTHING`` of a session and a submission."""
    s, sub = schema.session, schema.submission
    now = bindparam("now", type_=s.c.created_at.type)
    return _Inserts(
        session=insert(s)
        .values(
            id=bindparam("id"),
            uid=bindparam("uid"),
            compat=bindparam("compat"),
            tenant=bindparam("tenant"),
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["id"]),
        submission=insert(sub)
        .values(
            id=bindparam("id"),
            session_id=bindparam("sid"),
            request_id=bindparam("rid"),
            status="queued",
            input=bindparam("input", type_=sub.c.input.type),
            principal=bindparam("principal", type_=sub.c.principal.type),
            callback_url=bindparam("callback_url", type_=sub.c.callback_url.type),
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["session_id", "request_id"])
        .returning(*sub.c),
    )


_SESSION_KEY = select(schema.session.c.compat).where(schema.session.c.id == bindparam("sid"))


class Submissions:
    """Accepted input, reached as ``store.submissions``."""

    def __init__(
        self, backend: Backend, handoff: Handoff, notify: Callable[[CommitReceipt], None]
    ) -> None:
        self._backend = backend
        self._handoff = handoff
        self._notify = notify

    async def submit(
        self,
        *,
        session_id: str,
        request_id: str,
        input: Any,
        compat: str,
        wake: Callable[[str], OutboxMessage],
        principal: str | None = None,
        callback_url: str | None = None,
    ) -> SubmitReceipt:
        """Accept ``input`` once for ``(session_id, request_id)`` and wake the session's Brains.

        A new session is created for the Brains of ``compat``, for the tenant its id says
        (``shared/tenancy.py``); an existing one keeps the key it was created with, and
        ``wake(key)`` builds the wake-up for that key. ``principal``: who submits, kept with
        the submission; ``callback_url``: where its end is to be posted.

        Where the backend can, at once (``Backend.submit_at_once``: on PostgreSQL one
        statement in one hop). Otherwise, or when that statement cannot decide alone, one
        transaction in one hop, of statements built once: the session's insert (a no-op
        when it exists), a read of its key, the submission's insert returning the
        row (or, for a request id seen before, a read of the original), and the wake-up.
        """
        now = time.time()
        tenant, _ = split_key(session_id)
        handoff = self._handoff
        plan = SubmitPlan(
            session_id=session_id,
            request_id=request_id,
            input=input,
            compat=compat,
            wake=wake(compat),
            tenant=tenant,
            principal=principal,
            callback_url=callback_url,
            now=now,
        )
        at_once = await self._backend.submit_at_once(plan, handoff)
        if at_once is not None:
            record, rows = at_once
            if rows:
                self._notify(CommitReceipt(session_id, version=-1, entry_seqs=[], outbox=rows))
            return SubmitReceipt(record, created=bool(rows))

        def work(conn: Connection) -> tuple[SubmissionRecord, tuple[OutboxRow, ...]]:
            inserts = _inserts(self._backend.insert)
            conn.execute(
                inserts.session,
                {"id": session_id, "uid": new_id(), "compat": compat, "tenant": tenant, "now": now},
            )
            key: str = conn.execute(_SESSION_KEY, {"sid": session_id}).scalar_one()
            params = {
                "id": new_id(),
                "sid": session_id,
                "rid": request_id,
                "input": input,
                "principal": principal,
                "callback_url": callback_url,
                "now": now,
            }
            row = conn.execute(inserts.submission, params).one_or_none()
            if row is None:  # seen before: the original, and no wake-up
                return by_request_sync(conn, session_id, request_id), ()
            rows = insert_outbox_sync(conn, session_id, [wake(str(key))], now, handoff=handoff)
            return SubmissionRecord(**dict(row._mapping)), rows

        record, rows = await self._backend.write(work)
        if rows:
            self._notify(CommitReceipt(session_id, version=-1, entry_seqs=[], outbox=rows))
        return SubmitReceipt(record, created=bool(rows))

    async def get(self, session_id: str, request_id: str) -> SubmissionRecord:
        """The submission of ``request_id`` in ``session_id``, as it stands now: one statement,
        in one hop (what a waiting client reads again at every notification)."""
        return await self._backend.read(lambda conn: by_request_sync(conn, session_id, request_id))

    async def of_session(self, session_id: str) -> list[SubmissionRecord]:
        """Every submission of ``session_id``, oldest first."""
        async with self._backend.snapshot() as conn:
            return await submissions_in(conn, session_id)

    async def submitted_by(self, session_id: str, principal: str) -> bool:
        """Whether ``principal`` submitted anything to ``session_id``."""
        sub = schema.submission
        query = select(exists().where(sub.c.session_id == session_id, sub.c.principal == principal))
        async with self._backend.snapshot() as conn:
            return bool(await conn.scalar(query))

    async def callbacks_due(self, now: float, *, limit: int) -> list[CallbackDue]:
        """Ended submissions whose end is still to be posted to their ``callback_url`` and
        whose next attempt is due by ``now``, the longest ended first."""
        sub = schema.submission
        query = (
            select(
                sub.c.id,
                sub.c.session_id,
                sub.c.request_id,
                sub.c.status,
                sub.c.answer,
                sub.c.error,
                sub.c.callback_url,
                sub.c.callback_attempts,
            )
            .where(
                sub.c.callback_url.is_not(None),
                sub.c.callback_done_at.is_(None),
                sub.c.status.in_(sorted(FINAL_SUBMISSION_STATUSES)),
                func.coalesce(sub.c.callback_next_at, 0) <= now,
            )
            .order_by(sub.c.updated_at)
            .limit(limit)
        )
        async with self._backend.snapshot() as conn:
            return [CallbackDue(**dict(r._mapping)) for r in await conn.execute(query)]

    async def record_callback(
        self,
        submission_id: str,
        *,
        attempts: int,
        error: str | None,
        done_at: float | None = None,
        next_at: float | None = None,
    ) -> None:
        """Record an attempt to post a submission's end: done (``done_at``), or to be tried
        again at ``next_at``; a delivery recorded done is not changed again."""
        sub = schema.submission
        values: dict[str, object] = {"callback_attempts": attempts, "callback_error": error}
        if done_at is not None:
            values["callback_done_at"] = done_at
        if next_at is not None:
            values["callback_next_at"] = next_at
        async with self._backend.transaction() as conn:
            await conn.execute(
                update(sub)
                .where(sub.c.id == submission_id, sub.c.callback_done_at.is_(None))
                .values(**values)
            )
