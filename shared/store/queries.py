"""Reads beyond one session's snapshot: the rows a wait refers to, and what the sweeper
looks for across all sessions. Each is one query, served by an index."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, func, select, union_all
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.store import schema
from shared.store.engine import read_in_one_hop, read_transaction
from shared.store.load import (
    operation_record,
    operations_by_ids_sync,
    task_record,
    tasks_by_ids_sync,
)
from shared.store.records import OperationRecord, TaskRecord

FINAL = ("succeeded", "failed", "uncertain", "cancelled")


async def tasks_by_ids(engine: AsyncEngine, ids: list[str]) -> dict[str, TaskRecord]:
    if not ids:
        return {}
    return await read_in_one_hop(engine, lambda conn: tasks_by_ids_sync(conn, ids))


async def operations_by_ids(engine: AsyncEngine, ids: list[str]) -> dict[str, OperationRecord]:
    if not ids:
        return {}
    return await read_in_one_hop(engine, lambda conn: operations_by_ids_sync(conn, ids))


async def tasks_and_operations(
    engine: AsyncEngine, task_ids: list[str], operation_ids: list[str]
) -> tuple[dict[str, TaskRecord], dict[str, OperationRecord]]:
    """``tasks_by_ids`` and ``operations_by_ids`` together, in one hop."""
    if not task_ids and not operation_ids:
        return {}, {}
    return await read_in_one_hop(
        engine,
        lambda conn: (
            tasks_by_ids_sync(conn, task_ids),
            operations_by_ids_sync(conn, operation_ids),
        ),
    )


@dataclass(frozen=True)
class SessionRef:
    """A session with something to do, and since when (its oldest unmet need)."""

    session_id: str
    compat: str
    since: float


async def sessions_needing_attention(
    engine: AsyncEngine, *, now: float, grace: float = 0.0, limit: int = 1000
) -> list[SessionRef]:
    """Sessions with work a Brain could have done ``grace`` seconds ago and has not: due
    timers, runnable or interrupted tasks, winding-down parents, tool outcomes not yet
    applied, queued submissions. The grace leaves the normal triggers (in-memory timers,
    result events, wake-ups in flight) time to land before a duplicate is sent.

    Oldest need first, so that under ``limit`` the sessions waiting longest come first."""
    t, s, o, sub = schema.task, schema.session, schema.operation, schema.submission
    before = now - grace
    runnable = select(t.c.session_id, t.c.updated_at.label("since")).where(
        t.c.status.in_(("pending", "running", "completing")), t.c.updated_at <= before
    )
    due = select(t.c.session_id, t.c.wake_at.label("since")).where(
        t.c.status == "sleeping", t.c.wake_at <= before
    )
    unapplied = (
        select(t.c.session_id, o.c.updated_at.label("since"))
        .join(o, o.c.operation_id == t.c.operation_id)
        .where(t.c.status == "waiting", o.c.status.in_(FINAL), o.c.updated_at <= before)
    )
    queued = select(sub.c.session_id, sub.c.created_at.label("since")).where(
        sub.c.status == "queued", sub.c.created_at <= before
    )
    needs = union_all(runnable, due, unapplied, queued).subquery()
    since = func.min(needs.c.since)
    stmt = (
        select(s.c.id, s.c.compat, since.label("since"))
        .join(needs, needs.c.session_id == s.c.id)
        .group_by(s.c.id, s.c.compat)
        .order_by(since, s.c.id)
        .limit(limit)
    )
    async with read_transaction(engine) as conn:
        return [SessionRef(r.id, r.compat, r.since) for r in await conn.execute(stmt)]


@dataclass(frozen=True)
class PendingCall:
    """A tool call the Brain waits for that has no outcome yet."""

    task: TaskRecord
    compat: str
    operation_status: str | None
    updated_at: float


async def calls_without_outcome(
    engine: AsyncEngine, *, older_than: float, limit: int = 1000
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
            (o.c.status.is_(None)) | and_(o.c.status.not_in(FINAL), o.c.updated_at < older_than),
        )
        .limit(limit)
    )
    async with read_transaction(engine) as conn:
        rows = list(await conn.execute(stmt))
    calls = []
    for r in rows:
        fields = {
            k: v for k, v in r._mapping.items() if k not in ("compat", "op_status", "op_updated")
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


async def session_history(
    engine: AsyncEngine, session_id: str
) -> tuple[list[TaskRecord], list[OperationRecord]]:
    """Every task (open or not) and every operation of a session, oldest first."""
    t, o = schema.task, schema.operation
    async with read_transaction(engine) as conn:
        tasks = await conn.execute(
            select(t).where(t.c.session_id == session_id).order_by(t.c.created_at, t.c.id)
        )
        ops = await conn.execute(
            select(o).where(o.c.session_id == session_id).order_by(o.c.created_at)
        )
        return [task_record(r) for r in tasks], [operation_record(r) for r in ops]
