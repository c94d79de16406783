"""Reads beyond one session's snapshot: the rows a wait refers to, and what the sweeper
looks for across all sessions. Each is one query, served by an index."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, case, exists, func, literal, or_, select, union_all

from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.store.details import history_in
from brainhands.shared.store.load import (
    operations_by_ids_sync,
    tasks_by_ids_sync,
)
from brainhands.shared.store.records import (
    FINAL_OPERATION_STATUSES,
    OPEN_SUBMISSION_STATUSES,
    OperationRecord,
    TaskRecord,
)


@dataclass(frozen=True)
class SessionRef:
    """A session with something to do, and since when (its oldest unmet need)."""

    session_id: str
    compat: str
    since: float
    blocked: bool = False
    """Every need of the session is a task some Brain found no handler for: another build
    may take it up, but waking the session for it each period only repeats the finding."""


@dataclass(frozen=True)
class PendingCall:
    """A tool call the Brain waits for that has no outcome yet."""

    task: TaskRecord
    compat: str
    operation_status: str | None
    updated_at: float


class Queries:
    """Reads beyond one session's snapshot, reached as ``store.queries``."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def tasks_by_ids(self, ids: list[str]) -> dict[str, TaskRecord]:
        if not ids:
            return {}
        return await self._backend.read(lambda conn: tasks_by_ids_sync(conn, ids))

    async def operations_by_ids(self, ids: list[str]) -> dict[str, OperationRecord]:
        if not ids:
            return {}
        return await self._backend.read(lambda conn: operations_by_ids_sync(conn, ids))

    async def sessions_needing_attention(
        self, *, now: float, grace: float = 0.0, limit: int = 1000
    ) -> list[SessionRef]:
        """Sessions with work a Brain could have done ``grace`` seconds ago and has not: due
        timers, runnable or interrupted tasks, winding-down parents, tool outcomes not yet
        applied, queued submissions, inbox requests (a cancel, a signal a task waits for) not yet
        applied. The grace leaves
        the normal triggers (in-memory timers, result events, wake-ups in flight) time to land
        before a duplicate is sent.

        A blocked task (``blocked_reason`` set) is a need since it was blocked, and is reported
        apart (``SessionRef.blocked``) when the session has no other: the sweeper looks at it
        again only rarely. A session's ``since`` is its oldest unblocked need when it has one.

        Oldest need first, so that under ``limit`` the sessions waiting longest come first, and
        sessions with only blocked tasks last."""
        t, s, o, sub = schema.task, schema.session, schema.operation, schema.submission
        before = now - grace
        unblocked, blocked = t.c.blocked_reason.is_(None), t.c.blocked_reason.is_not(None)
        no, yes = literal(0).label("blocked"), literal(1).label("blocked")
        runnable = select(t.c.session_id, t.c.updated_at.label("since"), no).where(
            t.c.status.in_(("pending", "running", "completing")),
            t.c.updated_at <= before,
            unblocked,
        )
        # Sleeping tasks, and signal waits whose timeout is due.
        due = select(t.c.session_id, t.c.wake_at.label("since"), no).where(
            t.c.status.in_(("sleeping", "waiting")), t.c.wake_at <= before, unblocked
        )
        stuck = select(t.c.session_id, t.c.updated_at.label("since"), yes).where(
            t.c.status.in_(("pending", "running", "completing", "sleeping")), blocked
        )
        unapplied = (
            select(t.c.session_id, o.c.updated_at.label("since"), no)
            .join(o, o.c.operation_id == t.c.operation_id)
            .where(
                t.c.status == "waiting",
                o.c.status.in_(FINAL_OPERATION_STATUSES),
                o.c.updated_at <= before,
            )
        )
        # A submission waiting its turn behind an open root task is no need of its own.
        root_open = exists().where(
            t.c.session_id == sub.c.session_id, t.c.parent_id.is_(None), t.c.status != "terminal"
        )
        queued = select(sub.c.session_id, sub.c.created_at.label("since"), no).where(
            sub.c.status == "queued", sub.c.created_at <= before, ~root_open
        )
        i = schema.inbox
        # A signal is kept until a wait receives it: it is a need only once a task waits for it.
        awaited = exists().where(
            t.c.session_id == i.c.session_id, t.c.status == "waiting", t.c.wait_signal == i.c.name
        )
        requested = select(i.c.session_id, i.c.created_at.label("since"), no).where(
            i.c.applied_at.is_(None), i.c.created_at <= before, or_(i.c.kind != "signal", awaited)
        )
        needs = union_all(runnable, due, stuck, unapplied, queued, requested).subquery()
        since = func.coalesce(
            func.min(case((needs.c.blocked == 0, needs.c.since))), func.min(needs.c.since)
        )
        only_blocked = func.min(needs.c.blocked)
        stmt = (
            select(s.c.id, s.c.compat, since.label("since"), only_blocked.label("blocked"))
            .join(needs, needs.c.session_id == s.c.id)
            .group_by(s.c.id, s.c.compat)
            .order_by(only_blocked, since, s.c.id)
            .limit(limit)
        )
        async with self._backend.snapshot() as conn:
            rows = await conn.execute(stmt)
            return [SessionRef(r.id, r.compat, r.since, blocked=r.blocked == 1) for r in rows]

    async def sessions_with_open_work(self, session_ids: list[str]) -> dict[str, bool]:
        """For each of ``session_ids`` in the store, whether it has open work: a task not
        terminal or a submission not answered. Sessions not in the store are left out."""
        if not session_ids:
            return {}
        s, t, sub = schema.session, schema.task, schema.submission
        open_work = or_(
            exists().where(t.c.session_id == s.c.id, t.c.status != "terminal"),
            exists().where(sub.c.session_id == s.c.id, sub.c.status.in_(OPEN_SUBMISSION_STATUSES)),
        )
        stmt = select(s.c.id, open_work.label("open")).where(s.c.id.in_(session_ids))
        async with self._backend.snapshot() as conn:
            return {r.id: bool(r.open) for r in await conn.execute(stmt)}

    async def calls_without_outcome(
        self, *, older_than: float, limit: int = 1000
    ) -> list[PendingCall]:
        """Tool tasks waiting since before ``older_than`` whose operation has no outcome: their
        job may be lost (never published, purged, dropped by a crash) and may need re-sending."""
        t, s, o = schema.task, schema.session, schema.operation
        stmt = (
            select(t, s.c.compat, o.c.status.label("op_status"), o.c.updated_at.label("op_updated"))
            .join(s, s.c.id == t.c.session_id)
            .outerjoin(o, o.c.operation_id == t.c.operation_id)
            .where(
                t.c.status == "waiting",
                t.c.operation_id.is_not(None),
                t.c.updated_at < older_than,
                (o.c.status.is_(None))
                | and_(o.c.status.not_in(FINAL_OPERATION_STATUSES), o.c.updated_at < older_than),
            )
            .limit(limit)
        )
        async with self._backend.snapshot() as conn:
            rows = list(await conn.execute(stmt))
        calls = []
        for r in rows:
            fields = {
                k: v
                for k, v in r._mapping.items()
                if k not in ("compat", "op_status", "op_updated")
            }
            calls.append(
                PendingCall(
                    task=TaskRecord(**fields),
                    compat=r.compat,
                    operation_status=r.op_status,
                    updated_at=r.op_updated or r.updated_at,
                )
            )
        return calls

    async def history(self, session_id: str) -> tuple[list[TaskRecord], list[OperationRecord]]:
        """Every task (open or not) and every operation of a session, oldest first."""
        async with self._backend.snapshot() as conn:
            return await history_in(conn, session_id)
