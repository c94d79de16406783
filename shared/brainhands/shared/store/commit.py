"""Applying a draft: one transaction, guarded by the session's version and fence.

The guard (``guard``) is the first statement: it bumps the session's version and reserves
the entry sequence numbers. Every later statement of the commit runs only after that row is
locked by this transaction, so commits of one session are serialized and entry ``seq``
stays gap-free. Where the backend chains writes, a draft is one statement instead
(``chained``): the guard and every write it allows, atomic on its own.

The statements are built once (with bind parameters) rather than per commit: building a
Core statement and computing its cache key costs more CPU than executing it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import bindparam, insert, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from brainhands.shared.errors import (
    BrainhandsError,
    ConflictError,
    NotFoundError,
)
from brainhands.shared.store import schema
from brainhands.shared.store.backends.postgres.chained import chainable, one_shape, write_chained
from brainhands.shared.store.charges import add_charges_sync
from brainhands.shared.store.documents import write_documents_sync
from brainhands.shared.store.draft import Draft, OutboxMessage
from brainhands.shared.store.guard import (
    GUARD,
    ends_submission,
    guard_params,
    notifications,
    raise_guard_failure,
)
from brainhands.shared.store.handoff import Handoff
from brainhands.shared.store.hot import HotStatement, hot, run
from brainhands.shared.store.records import CommitReceipt, OutboxRow

_GUARD = GUARD.returning(schema.session.c.entry_count)
_GUARD_NOTIFY = {a: hot(_GUARD.returning(*notifications(a))) for a in (False, True)}
_HOT_GUARD = hot(_GUARD)
_INSERT_ENTRIES = hot(insert(schema.entry))
_INSERT_TASKS = hot(insert(schema.task))
_INSERT_SUBMISSIONS = hot(insert(schema.submission))
_INSERT_BLOBS = hot(insert(schema.blob))
_i = schema.inbox
_MARK_APPLIED = hot(
    update(_i)
    .where(_i.c.id.in_(bindparam("ids", expanding=True)), _i.c.session_id == bindparam("sid"))
    .values(applied_at=bindparam("now", type_=_i.c.applied_at.type))
)
_INSERT_OUTBOX = hot(
    insert(schema.outbox).returning(schema.outbox.c.id, sort_by_parameter_order=True)
)


@cache
def _update_task(columns: tuple[str, ...], guarded: bool) -> HotStatement:
    """``UPDATE task`` of ``columns`` (bound as ``v_<name>``), by id, session (and status)."""
    t = schema.task
    stmt = update(t).where(t.c.id == bindparam("w_id"), t.c.session_id == bindparam("w_session_id"))
    if guarded:
        stmt = stmt.where(t.c.status == bindparam("w_status"))
    return hot(stmt.values({t.c[c]: bindparam(f"v_{c}", type_=t.c[c].type) for c in columns}))


@cache
def _update_submission(columns: tuple[str, ...]) -> HotStatement:
    sub = schema.submission
    return hot(
        update(sub)
        .where(sub.c.id == bindparam("w_id"), sub.c.session_id == bindparam("w_session_id"))
        .values({sub.c[c]: bindparam(f"v_{c}", type_=sub.c[c].type) for c in columns})
    )


@cache
def _answer_joined(columns: tuple[str, ...]) -> HotStatement:
    """``UPDATE submission`` of ``columns`` for the submissions still running that joined
    root task ``w_task_id``."""
    sub = schema.submission
    return hot(
        update(sub)
        .where(
            sub.c.session_id == bindparam("w_session_id"),
            sub.c.task_id == bindparam("w_task_id"),
            sub.c.status == "running",
        )
        .values({sub.c[c]: bindparam(f"v_{c}", type_=sub.c[c].type) for c in columns})
    )


def _bound(changes: Mapping[str, Any], now: float) -> tuple[tuple[str, ...], dict[str, Any]]:
    columns = tuple(sorted({*changes, "updated_at"}))
    params = {f"v_{c}": v for c, v in changes.items()}
    params["v_updated_at"] = now
    return columns, params


def apply_draft_sync(
    conn: Connection,
    draft: Draft,
    *,
    notify: bool,
    chained: bool = False,
    handoff: Handoff,
) -> CommitReceipt:
    """Apply every change of ``draft`` on ``conn`` (inside the caller's transaction, if
    any: see ``one_statement``); ``notify``: the backend's commits notify listeners
    (``notifications``); ``chained``: the backend chains writes (``chained``)."""
    [receipt] = _write(conn, [draft], time.time(), notify, chained, handoff)
    if receipt is None:
        raise_guard_failure(conn, draft)
    assert receipt is not None
    return receipt


def apply_drafts_sync(
    conn: Connection,
    drafts: Sequence[Draft],
    *,
    notify: bool,
    chained: bool = False,
    handoff: Handoff,
) -> list[CommitReceipt | BrainhandsError]:
    """Apply each of ``drafts`` (of distinct sessions) on ``conn``, in the caller's one
    transaction: each session's guard is checked on its own, and a refused one drops only
    its draft, whose place in the result holds the error a lone commit would have raised
    (nothing of it was written: the guard is its first write). Any other failure raises,
    and the caller's transaction must be rolled back."""
    out: list[CommitReceipt | BrainhandsError] = []
    for draft, receipt in zip(
        drafts, _write(conn, drafts, time.time(), notify, chained, handoff), strict=True
    ):
        if receipt is None:
            try:
                raise_guard_failure(conn, draft)
            except BrainhandsError as refused:
                out.append(refused)
            continue
        out.append(receipt)
    return out


def one_statement(draft: Draft, *, chained: bool) -> bool:
    """Whether ``draft`` is written as one statement, atomic without a transaction around
    it (``chained``: on a backend that chains writes)."""
    return chained and chainable(draft)


def one_round_trip(drafts: Sequence[Draft], *, chained: bool, notify: bool) -> bool:
    """Whether ``drafts`` are written in one round trip, atomic without a transaction around
    it: each as one statement, all by the same one (``chained.one_shape``), and, for more
    than one, with no tenant charge (added last, in one more statement: ``tenant_budgets``)."""
    if len(drafts) > 1 and any(d.charge is not None for d in drafts):
        return False
    return all(one_statement(d, chained=chained) for d in drafts) and one_shape(
        drafts, notify=notify
    )


def _write(
    conn: Connection,
    drafts: Sequence[Draft],
    now: float,
    notify: bool,
    chained: bool,
    handoff: Handoff,
) -> list[CommitReceipt | None]:
    """Write ``drafts``; None for each whose guard was refused (nothing of it written).
    A draft alone that is one statement adds its tenant charge in it; the others' charges
    are added last (``tenant_budgets``)."""
    lone = len(drafts) == 1
    one = [i for i, draft in enumerate(drafts) if one_statement(draft, chained=chained)]
    written: dict[int, CommitReceipt | None] = dict(
        zip(
            one,
            write_chained(
                conn,
                [drafts[i] for i in one],
                now,
                notify=notify,
                publish_after=handoff.publish_after(now),
                charges=lone,
            ),
            strict=True,
        )
    )
    for i, draft in enumerate(drafts):
        if i in written:
            continue
        guard = _GUARD_NOTIFY[ends_submission(draft)] if notify else _HOT_GUARD
        entry_count: int | None = run(conn, guard, guard_params(draft, now)).scalar_one_or_none()
        written[i] = (
            None if entry_count is None else _apply_guarded(conn, draft, entry_count, now, handoff)
        )
    charged = [
        d for i, d in enumerate(drafts) if written[i] is not None and not (lone and i in one)
    ]
    add_charges_sync(conn, charged)
    return [written[i] for i in range(len(drafts))]


def _apply_guarded(
    conn: Connection, draft: Draft, entry_count: int, now: float, handoff: Handoff
) -> CommitReceipt:
    first_seq = entry_count - len(draft.entries) + 1
    seqs = list(range(first_seq, entry_count + 1))

    if draft.entries:
        run(
            conn,
            _INSERT_ENTRIES,
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
    if draft.blobs:
        run(
            conn,
            _INSERT_BLOBS,
            [{"id": i, "data": data, "created_at": now} for i, data in draft.blobs.items()],
        )
    write_documents_sync(conn, draft.session_id, draft.documents, now)
    # One executemany per set of columns: a batch's rows must all name the same ones.
    by_columns: dict[frozenset[str], list[dict[str, Any]]] = {}
    for t in draft.new_tasks:
        row = {**t, "session_id": draft.session_id, "created_at": now, "updated_at": now}
        by_columns.setdefault(frozenset(row), []).append(row)
    for rows in by_columns.values():
        run(conn, _INSERT_TASKS, rows)
    for change in draft.task_updates:
        columns, params = _bound(change.changes, now)
        params["w_id"] = change.task_id
        params["w_session_id"] = draft.session_id
        if change.expected_status is not None:
            params["w_status"] = change.expected_status
        stmt = _update_task(columns, change.expected_status is not None)
        done = run(conn, stmt, params)
        if done.rowcount != 1:
            raise ConflictError(
                f"task {change.task_id} of session {draft.session_id} is missing or no longer "
                f"{change.expected_status}"
            )
    if draft.new_submissions:
        run(
            conn,
            _INSERT_SUBMISSIONS,
            [
                {**sub, "session_id": draft.session_id, "created_at": now, "updated_at": now}
                for sub in draft.new_submissions
            ],
        )
    for sub_change in draft.submission_updates:
        columns, params = _bound(sub_change.changes, now)
        params["w_id"] = sub_change.submission_id
        params["w_session_id"] = draft.session_id
        done = run(conn, _update_submission(columns), params)
        if done.rowcount != 1:
            raise NotFoundError(f"submission {sub_change.submission_id} not found")
    for joined in draft.joined_answers:
        columns, params = _bound(joined.changes, now)
        params["w_session_id"] = draft.session_id
        params["w_task_id"] = joined.task_id
        run(conn, _answer_joined(columns), params)
    if draft.applied_inbox:
        run(
            conn,
            _MARK_APPLIED,
            {"ids": draft.applied_inbox, "sid": draft.session_id, "now": now},
        )
    outbox = insert_outbox_sync(conn, draft.session_id, draft.outbox, now, handoff=handoff)
    return CommitReceipt(
        session_id=draft.session_id,
        version=draft.version + 1,
        entry_seqs=seqs,
        outbox=outbox,
    )


async def insert_outbox(
    conn: AsyncConnection,
    session_id: str | None,
    messages: list[OutboxMessage],
    now: float,
    *,
    handoff: Handoff,
) -> tuple[OutboxRow, ...]:
    """Add outbox rows in the caller's transaction and return them with their ids.

    While a relay runs in this process (``handoff``) the rows are left to it, and it publishes
    them right after the commit; other relays take them only once the hand-off is over.
    """
    return await conn.run_sync(insert_outbox_sync, session_id, messages, now, handoff=handoff)


def insert_outbox_sync(
    conn: Connection,
    session_id: str | None,
    messages: list[OutboxMessage],
    now: float,
    *,
    handoff: Handoff,
) -> tuple[OutboxRow, ...]:
    if not messages:
        return ()
    after = handoff.publish_after(now)
    ids: Sequence[int] = (
        run(
            conn,
            _INSERT_OUTBOX,
            [
                {
                    "session_id": session_id,
                    "routing_key": m.routing_key,
                    "body": m.body,
                    "headers": m.headers,
                    "created_at": now,
                    "publish_after": after,
                }
                for m in messages
            ],
        )
        .scalars()
        .all()
    )
    return tuple(
        OutboxRow(row_id, m.routing_key, m.body, m.headers)
        for row_id, m in zip(ids, messages, strict=True)
    )
