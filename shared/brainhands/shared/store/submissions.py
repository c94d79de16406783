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
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Insert,
    Table,
    bindparam,
    exists,
    func,
    insert,
    literal,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import schema
from brainhands.shared.store.commit import insert_outbox_sync, publish_after
from brainhands.shared.store.details import submissions_in
from brainhands.shared.store.draft import OutboxMessage, new_id
from brainhands.shared.store.hot import HotStatement, hot, run
from brainhands.shared.store.records import (
    FINAL_SUBMISSION_STATUSES,
    CommitReceipt,
    OutboxRow,
    SubmissionRecord,
)
from brainhands.shared.tenancy import split_key

if TYPE_CHECKING:
    from brainhands.shared.store.store import Store


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


def _submit_chained(
    conn: Connection,
    session_id: str,
    request_id: str,
    input: Any,
    compat: str,
    message: OutboxMessage,
    tenant: str,
    principal: str | None,
    callback_url: str | None,
    now: float,
    handoff: float | None,
) -> tuple[SubmissionRecord, tuple[OutboxRow, ...]] | None:
    """``submit`` as one statement (``_SUBMIT``), for a session new or of key ``compat``:
    the submission and its wake-up ``message`` (built for ``compat``), or, for a request id
    seen before, the original and nothing new. None when the statement wrote nothing and
    cannot tell why for sure (the session has another key, or was created by a transaction
    that committed after this statement's snapshot): the caller takes the longer way."""
    params = {
        "id": new_id(),
        "uid": new_id(),
        "sid": session_id,
        "rid": request_id,
        "compat": compat,
        "tenant": tenant,
        "input": input,
        "principal": principal,
        "callback_url": callback_url,
        "now": now,
        "routing_key": message.routing_key,
        "body": message.body,
        "headers": message.headers,
        "publish_after": publish_after(now, handoff),
    }
    row = run(conn, _SUBMIT, params).one_or_none()
    if row is None or row.key != compat:
        return None
    if row.outbox_id is None:  # seen before: the original, and no wake-up
        return _by_request_sync(conn, session_id, request_id), ()
    fields = row._mapping
    record = SubmissionRecord(**{c.name: fields[c.name] for c in schema.submission.c})
    wake_row = OutboxRow(row.outbox_id, message.routing_key, message.body, message.headers)
    return record, (wake_row,)


def _submit_statement() -> HotStatement:
    """The session's insert (a no-op when it exists), its key, the submission's insert
    when the key is the caller's (a no-op for a request id seen before), and the wake-up
    for a submission inserted; one row, with the submission and the wake-up's id, unless
    the session is not in the statement's snapshot."""
    s, sub, ob = schema.session, schema.submission, schema.outbox
    now = bindparam("now", type_=s.c.created_at.type)
    sid = bindparam("sid", type_=s.c.id.type)
    tenant = bindparam("tenant", type_=s.c.tenant.type)
    created = (
        postgresql.insert(s)
        .values(
            id=sid,
            uid=bindparam("uid"),
            compat=bindparam("compat"),
            tenant=tenant,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(s.c.compat)
        .cte("created")
    )
    # One of the two has the session's row: the statement's snapshot does not see a row
    # its own insert wrote, and the insert writes none when the row was there.
    key = union_all(
        select(created.c.compat),
        select(s.c.compat).where(s.c.id == sid),
    ).cte("key")
    columns = (
        "id", "session_id", "request_id", "status", "input", "principal", "callback_url",
        "created_at", "updated_at",
    )  # fmt: skip
    submitted = (
        postgresql.insert(sub)
        .from_select(
            columns,
            select(
                bindparam("id", type_=sub.c.id.type),
                sid,
                bindparam("rid", type_=sub.c.request_id.type),
                literal("queued", sub.c.status.type),
                bindparam("input", type_=sub.c.input.type),
                bindparam("principal", type_=sub.c.principal.type),
                bindparam("callback_url", type_=sub.c.callback_url.type),
                now,
                now,
            ).where(key.c.compat == bindparam("compat", type_=s.c.compat.type)),
        )
        .on_conflict_do_nothing(index_elements=["session_id", "request_id"])
        .returning(*sub.c)
        .cte("submitted")
    )
    woken = (
        insert(ob)
        .from_select(
            ["session_id", "routing_key", "body", "headers", "created_at", "publish_after"],
            select(
                submitted.c.session_id,
                bindparam("routing_key", type_=ob.c.routing_key.type),
                bindparam("body", type_=ob.c.body.type),
                bindparam("headers", type_=ob.c.headers.type),
                now,
                bindparam("publish_after", type_=ob.c.publish_after.type),
            ),
        )
        .returning(ob.c.id)
        .cte("woken")
    )
    return hot(
        select(
            key.c.compat.label("key"),
            *(submitted.c[c.name] for c in sub.c),
            woken.c.id.label("outbox_id"),
        )
        .select_from(key)
        .outerjoin(submitted, true())
        .outerjoin(woken, true())
    )


_SUBMIT = _submit_statement()


_SESSION_KEY = select(schema.session.c.compat).where(schema.session.c.id == bindparam("sid"))


_BY_REQUEST = select(schema.submission).where(
    schema.submission.c.session_id == bindparam("sid"),
    schema.submission.c.request_id == bindparam("rid"),
)


def _by_request_sync(conn: Connection, session_id: str, request_id: str) -> SubmissionRecord:
    row = conn.execute(_BY_REQUEST, {"sid": session_id, "rid": request_id}).one_or_none()
    if row is None:
        raise NotFoundError(f"no submission {request_id!r} in session {session_id}")
    return SubmissionRecord(**dict(row._mapping))


class Submissions:
    """Accepted input, reached as ``store.submissions``."""

    def __init__(self, store: Store) -> None:
        self._store = store

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

        Where the backend chains writes (PostgreSQL), one statement in one hop, without BEGIN
        and COMMIT (``_submit_chained``). Otherwise, or when that statement cannot decide alone,
        one transaction in one hop, of statements built once: the session's insert (a no-op
        when it exists), a read of its key, the submission's insert returning the
        row (or, for a request id seen before, a read of the original), and the wake-up.
        """
        now = time.time()
        tenant, _ = split_key(session_id)
        handoff = self._store.handoff
        if self._store.backend.chains_writes:
            chained = await self._store.backend.write(
                lambda conn: _submit_chained(
                    conn,
                    session_id,
                    request_id,
                    input,
                    compat,
                    wake(compat),
                    tenant,
                    principal,
                    callback_url,
                    now,
                    handoff,
                ),
                single_statement=True,
            )
            if chained is not None:
                record, rows = chained
                if rows:
                    self._store.notify(
                        CommitReceipt(session_id, version=-1, entry_seqs=[], outbox=rows)
                    )
                return SubmitReceipt(record, created=bool(rows))

        def work(conn: Connection) -> tuple[SubmissionRecord, tuple[OutboxRow, ...]]:
            inserts = _inserts(self._store.backend.insert)
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
                return _by_request_sync(conn, session_id, request_id), ()
            rows = insert_outbox_sync(conn, session_id, [wake(str(key))], now, handoff=handoff)
            return SubmissionRecord(**dict(row._mapping)), rows

        record, rows = await self._store.backend.write(work)
        if rows:
            self._store.notify(CommitReceipt(session_id, version=-1, entry_seqs=[], outbox=rows))
        return SubmitReceipt(record, created=bool(rows))

    async def get(self, session_id: str, request_id: str) -> SubmissionRecord:
        """The submission of ``request_id`` in ``session_id``, as it stands now: one statement,
        in one hop (what a waiting client reads again at every notification)."""
        return await self._store.backend.read(
            lambda conn: _by_request_sync(conn, session_id, request_id)
        )

    async def of_session(self, session_id: str) -> list[SubmissionRecord]:
        """Every submission of ``session_id``, oldest first."""
        async with self._store.backend.snapshot() as conn:
            return await submissions_in(conn, session_id)

    async def submitted_by(self, session_id: str, principal: str) -> bool:
        """Whether ``principal`` submitted anything to ``session_id``."""
        sub = schema.submission
        query = select(exists().where(sub.c.session_id == session_id, sub.c.principal == principal))
        async with self._store.backend.snapshot() as conn:
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
        async with self._store.backend.snapshot() as conn:
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
        async with self._store.backend.transaction() as conn:
            await conn.execute(
                update(sub)
                .where(sub.c.id == submission_id, sub.c.callback_done_at.is_(None))
                .values(**values)
            )
