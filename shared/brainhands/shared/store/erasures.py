"""Erasure: a session and everything it owns deleted, at a request or at the end of its
retention, with a record of who asked and when -- never of what it held.

What a session owns: its row, entries, documents and their history, tasks, submissions,
inbox requests, operations with their blobs, unsent outbox rows, and workspace versions
(their objects go at the sweeper's next collection unless another version names them).
The messages it has sent already stay in the outbox until the relays prune them (an hour
after they were sent): a session past its retention has none left. All go in
one transaction. The session's and its calls' Redis keys (leases, fences, witnesses) are
not the store's: the erasure record lists their resources until the sweeper, which holds
Redis, has deleted them (``pending_resources``, ``resources_deleted``).

A session with work open (a task not ended, a submission queued or running) is refused
unless the request cancels it too: then it is erased as it stands. A Brain holding it fails
its next commit (the row is gone), a Hands running one of its calls fails to record the
outcome, and nothing it would have sent next is sent; an effect already under way outside
cannot be called back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, and_, delete, exists, null, or_, select, update

from brainhands.shared.errors import NotFoundError, SessionRunning
from brainhands.shared.keys import operation_resource, session_resource
from brainhands.shared.statuses import OPEN_SUBMISSION_STATUSES
from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.tenancy import split_key

_s, _t, _sub, _o, _e = (
    schema.session,
    schema.task,
    schema.submission,
    schema.operation,
    schema.erasure,
)
_OWNED: tuple[Table, ...] = (
    schema.entry,
    schema.document_increment,
    schema.document,
    schema.task,
    schema.submission,
    schema.inbox,
    schema.workspace_version,
    schema.operation,
)
"""The tables whose rows carry the session's id, besides the outbox and its own row."""


@dataclass(frozen=True)
class Erased:
    """What an erasure deleted: rows by table (none of their content)."""

    session_id: str
    rows: dict[str, int]
    erased_at: float


def _open_work(session_id: Any) -> Any:
    return or_(
        exists().where(_t.c.session_id == session_id, _t.c.status != "terminal"),
        exists().where(
            _sub.c.session_id == session_id, _sub.c.status.in_(OPEN_SUBMISSION_STATUSES)
        ),
    )


class Erasures:
    """Erasing sessions, reached as ``store.erasures``."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def erase(
        self, session_id: str, *, principal: str, reason: str = "erased", cancel: bool = False
    ) -> Erased:
        """Delete the session and all it owns, and record who and when. ``NotFoundError``
        for no such session; ``SessionRunning`` if it has open work and not ``cancel``."""
        return await self._backend.write(
            lambda conn: _erase(conn, session_id, principal, reason, cancel, time.time())
        )

    async def expired(
        self, default_days: float | None, tenant_days: dict[str, float], *, limit: int
    ) -> list[str]:
        """Up to ``limit`` sessions past their retention: no open work, and last updated
        more than their tenant's days ago (``tenant_days``, else ``default_days``; None or
        0: kept for ever), the oldest first."""
        now = time.time()
        ages = [
            and_(_s.c.tenant == tenant, _s.c.updated_at < now - days * 86400)
            for tenant, days in tenant_days.items()
            if days
        ]
        if default_days:
            ages.append(
                and_(
                    _s.c.tenant.not_in(list(tenant_days)),
                    _s.c.updated_at < now - default_days * 86400,
                )
            )
        if not ages:
            return []
        query = (
            select(_s.c.id)
            .where(or_(*ages), ~_open_work(_s.c.id))
            .order_by(_s.c.updated_at)
            .limit(limit)
        )
        async with self._backend.snapshot() as conn:
            return [row.id for row in await conn.execute(query)]

    async def pending_resources(self, *, limit: int) -> dict[int, list[str]]:
        """Erasures whose Redis keys are still to delete: their lease resources, by id."""
        query = (
            select(_e.c.id, _e.c.resources)
            .where(_e.c.resources.is_not(None))
            .order_by(_e.c.id)
            .limit(limit)
        )
        async with self._backend.snapshot() as conn:
            return {row.id: list(row.resources) for row in await conn.execute(query)}

    async def resources_deleted(self, ids: list[int]) -> None:
        """The Redis keys of these erasures are gone."""
        async with self._backend.transaction() as conn:
            # SQL's NULL, not JSON's null: what the partial index leaves out.
            await conn.execute(update(_e).where(_e.c.id.in_(ids)).values(resources=null()))

    async def erased_among(self, session_ids: list[str]) -> set[str]:
        """Which of ``session_ids`` were erased (and may have been made again since)."""
        wanted = sorted(set(session_ids))
        if not wanted:
            return set()
        query = select(_e.c.session_id).where(_e.c.session_id.in_(wanted)).distinct()
        async with self._backend.snapshot() as conn:
            return {row.session_id for row in await conn.execute(query)}

    async def records(self, session_id: str) -> list[dict[str, Any]]:
        """The erasures of ``session_id`` (a key may be erased, made again and erased)."""
        query = select(_e).where(_e.c.session_id == session_id).order_by(_e.c.id)
        async with self._backend.snapshot() as conn:
            return [dict(row._mapping) for row in await conn.execute(query)]


def _erase(
    conn: Connection, session_id: str, principal: str, reason: str, cancel: bool, now: float
) -> Erased:
    # The row first, locked: a Brain's commit on it waits for this one, then finds it gone.
    found = conn.execute(
        select(_s.c.id, _open_work(_s.c.id).label("open"))
        .where(_s.c.id == session_id)
        .with_for_update(of=_s)
    ).one_or_none()
    if found is None:
        raise NotFoundError(f"session {session_id} does not exist")
    if found.open and not cancel:
        raise SessionRunning(
            f"session {session_id} has work open: cancel it first, or erase it with cancel"
        )
    calls = conn.execute(
        select(_o.c.operation_id, _o.c.blob_id, _o.c.arguments_blob_id).where(
            _o.c.session_id == session_id
        )
    ).all()
    blobs = [b for c in calls for b in (c.blob_id, c.arguments_blob_id) if b is not None]
    rows: dict[str, int] = {}
    for table in _OWNED:
        gone = conn.execute(delete(table).where(table.c.session_id == session_id))
        rows[table.name] = gone.rowcount
    # Unsent rows, by the outbox's small index of them: what the session would send next.
    # No index finds its sent ones among every session's; the relays' prune takes them.
    out = schema.outbox
    unsent = out.c.sent_at.is_(None)
    rows[out.name] = conn.execute(
        delete(out).where(unsent, out.c.session_id == session_id)
    ).rowcount
    rows["blob"] = conn.execute(delete(schema.blob).where(schema.blob.c.id.in_(blobs))).rowcount
    rows["session"] = conn.execute(delete(_s).where(_s.c.id == session_id)).rowcount
    resources = [session_resource(session_id), *(operation_resource(c.operation_id) for c in calls)]
    conn.execute(
        _e.insert().values(
            session_id=session_id,
            tenant=split_key(session_id)[0],
            principal=principal,
            reason=reason,
            rows=rows,
            resources=resources,
            erased_at=now,
        )
    )
    return Erased(session_id, rows, now)
