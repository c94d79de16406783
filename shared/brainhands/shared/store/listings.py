"""Sessions as lists show them: a tenant's sessions page by page, whether a session exists,
and the marks by which a watcher of a list (or of a session) that cannot be notified sees
that something changed. Read for the API, never on a worker's path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, exists, func, literal, or_, select

from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.vocabulary import (
    APPROVAL_KIND,
    BUDGET_SIGNAL,
    COMPENSATION_SIGNAL,
    DECISION_PREFIX,
)

_s, _t, _i = schema.session, schema.task, schema.inbox


@dataclass(frozen=True)
class SessionFilter:
    tenant: str
    status: str | None = None
    """``open`` (a task not terminal) or ``idle``."""
    needs_action: bool | None = None
    compat: str | None = None
    updated_since: float | None = None


@dataclass(frozen=True)
class SessionSummary:
    """One line of a session list: the session of store key ``id``."""

    id: str
    compat: str
    version: int
    created_at: float
    updated_at: float
    open: bool
    """A task of it is not terminal."""
    needs_action: bool
    """A call of it waits for a decision, its run for a raised budget, or a task whose undo
    failed for an operator's act."""


def _listing(which: SessionFilter) -> Select[Any]:
    open_work = exists().where(_t.c.session_id == _s.c.id, _t.c.status != "terminal")
    undecided = and_(
        _t.c.kind == APPROVAL_KIND,
        ~exists().where(
            _i.c.session_id == _t.c.session_id,
            _i.c.kind == "signal",
            _i.c.key == literal(DECISION_PREFIX) + _t.c.id,
        ),
    )
    out_of_budget = _t.c.wait_signal == BUDGET_SIGNAL
    undo_failed = _t.c.wait_signal.startswith(COMPENSATION_SIGNAL, autoescape=True)
    waiting = exists().where(
        _t.c.session_id == _s.c.id,
        _t.c.status == "waiting",
        or_(undecided, out_of_budget, undo_failed),
    )
    query = select(
        _s.c.id,
        _s.c.compat,
        _s.c.version,
        _s.c.created_at,
        _s.c.updated_at,
        open_work.label("open"),
        waiting.label("needs_action"),
    )
    query = query.where(_s.c.tenant == which.tenant)
    if which.status == "open":
        query = query.where(open_work)
    elif which.status == "idle":
        query = query.where(~open_work)
    if which.needs_action is not None:
        query = query.where(waiting if which.needs_action else ~waiting)
    if which.compat is not None:
        query = query.where(_s.c.compat == which.compat)
    if which.updated_since is not None:
        query = query.where(_s.c.updated_at >= which.updated_since)
    return query


class Listings:
    """Sessions as lists show them, reached as ``store.listings``."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def page(
        self, which: SessionFilter, *, limit: int, after: tuple[float, str] | None
    ) -> list[SessionSummary]:
        """Up to ``limit`` of the sessions ``which`` selects, most recently updated first,
        from after the cursor ``after`` (the ``(updated_at, store key)`` of the last one
        seen)."""
        query = _listing(which)
        if after is not None:
            updated_at, last_key = after
            query = query.where(
                or_(
                    _s.c.updated_at < updated_at,
                    and_(_s.c.updated_at == updated_at, _s.c.id < last_key),
                )
            )
        query = query.order_by(_s.c.updated_at.desc(), _s.c.id.desc()).limit(limit)
        async with self._backend.snapshot() as conn:
            rows = (await conn.execute(query)).all()
        return [
            SessionSummary(
                r.id,
                r.compat,
                r.version,
                r.created_at,
                r.updated_at,
                bool(r.open),
                bool(r.needs_action),
            )
            for r in rows
        ]

    async def exists(self, session_id: str) -> bool:
        """Whether the session ``session_id`` exists."""
        async with self._backend.snapshot() as conn:
            return bool(await conn.scalar(select(exists().where(_s.c.id == session_id))))

    async def marks(
        self, session_ids: list[str], tenants: list[str]
    ) -> tuple[dict[str, int], dict[str, tuple[int, float | None]]]:
        """What changes with every commit, read in one snapshot: each session's version, and
        for each tenant, how many sessions it has and when the latest of them changed."""
        versions: dict[str, int] = {}
        tenant_marks: dict[str, tuple[int, float | None]] = {}
        async with self._backend.snapshot() as conn:
            if session_ids:
                rows = await conn.execute(
                    select(_s.c.id, _s.c.version).where(_s.c.id.in_(session_ids))
                )
                versions = {r.id: r.version for r in rows}
            if tenants:
                query = (
                    select(_s.c.tenant, func.count(), func.max(_s.c.updated_at))
                    .where(_s.c.tenant.in_(tenants))
                    .group_by(_s.c.tenant)
                )
                tenant_marks = {str(r[0]): (int(r[1]), r[2]) for r in await conn.execute(query)}
        return versions, tenant_marks
