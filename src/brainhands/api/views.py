"""What the API shows of sessions: one session's document, and pages of the session list."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, exists, literal, or_, select

from brainhands.client.direct import SessionView
from brainhands.shared.store import Store, schema
from brainhands.shared.tenancy import session_key, split_key
from brainhands.shared.vocabulary import APPROVAL_KIND, DECISION_PREFIX


def session_document(view: SessionView) -> dict[str, Any]:
    """A session as JSON: the session row, its entries, submissions, task tree, tool calls,
    requests, and the calls waiting for approval. ``version`` is the event id. The session
    is named as its tenant names it, wherever the rows name it."""
    key = view.session.id
    _, name = split_key(key)
    document: dict[str, Any] = _renamed(dataclasses.asdict(view), key, name)
    document["session"]["id"] = name
    document["version"] = view.session.version
    document["needs_action"] = view.needs_action
    return document


def _renamed(value: Any, key: str, name: str) -> Any:
    """``value`` with every ``session_id`` that is ``key`` made ``name``."""
    if isinstance(value, dict):
        return {
            k: name if k == "session_id" and v == key else _renamed(v, key, name)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_renamed(v, key, name) for v in value]
    return value


@dataclass(frozen=True)
class SessionFilter:
    tenant: str
    status: str | None = None
    """``open`` (a task not terminal) or ``idle``."""
    needs_action: bool | None = None
    compat: str | None = None
    updated_since: float | None = None


def _listing(which: SessionFilter) -> Select[Any]:
    s, t, i = schema.session, schema.task, schema.inbox
    open_work = exists().where(t.c.session_id == s.c.id, t.c.status != "terminal")
    waiting = exists().where(
        t.c.session_id == s.c.id,
        t.c.kind == APPROVAL_KIND,
        t.c.status == "waiting",
        ~exists().where(
            i.c.session_id == t.c.session_id,
            i.c.kind == "signal",
            i.c.key == literal(DECISION_PREFIX) + t.c.id,
        ),
    )
    query = select(
        s.c.id,
        s.c.compat,
        s.c.version,
        s.c.created_at,
        s.c.updated_at,
        open_work.label("open"),
        waiting.label("needs_action"),
    )
    query = query.where(s.c.tenant == which.tenant)
    if which.status == "open":
        query = query.where(open_work)
    elif which.status == "idle":
        query = query.where(~open_work)
    if which.needs_action is not None:
        query = query.where(waiting if which.needs_action else ~waiting)
    if which.compat is not None:
        query = query.where(s.c.compat == which.compat)
    if which.updated_since is not None:
        query = query.where(s.c.updated_at >= which.updated_since)
    return query


async def list_sessions(
    store: Store, which: SessionFilter, *, limit: int, after: tuple[float, str] | None
) -> tuple[list[dict[str, Any]], tuple[float, str] | None]:
    """A page of the tenant's sessions, most recently updated first, from after the cursor
    ``after`` (the last page's ``(updated_at, id)``); returns the page and the next cursor.
    Ids are the tenant's own."""
    s = schema.session
    query = _listing(which)
    if after is not None:
        updated_at, last_id = after
        session_id = session_key(which.tenant, last_id)
        query = query.where(
            or_(
                s.c.updated_at < updated_at, and_(s.c.updated_at == updated_at, s.c.id < session_id)
            )
        )
    query = query.order_by(s.c.updated_at.desc(), s.c.id.desc()).limit(limit + 1)
    async with store.backend.snapshot() as conn:
        rows = (await conn.execute(query)).all()
    page = [
        {
            "id": split_key(r.id)[1],
            "compat": r.compat,
            "version": r.version,
            "created_at": r.created_at,
            "updated_at": r.updated_at,
            "open": bool(r.open),
            "needs_action": bool(r.needs_action),
        }
        for r in rows[:limit]
    ]
    more = len(rows) > limit
    return page, ((page[-1]["updated_at"], page[-1]["id"]) if more and page else None)
