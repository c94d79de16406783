"""What the API shows of sessions: one session's document, and pages of the session list."""

from __future__ import annotations

import dataclasses
from typing import Any

from brainhands.client.views import SessionView
from brainhands.shared.store import SessionFilter, Store
from brainhands.shared.tenancy import session_key, split_key


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
    document["status"] = view.status
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


async def list_sessions(
    store: Store, which: SessionFilter, *, limit: int, after: tuple[float, str] | None
) -> tuple[list[dict[str, Any]], tuple[float, str] | None]:
    """A page of the tenant's sessions, most recently updated first, from after the cursor
    ``after`` (the last page's ``(updated_at, id)``); returns the page and the next cursor.
    Ids are the tenant's own."""
    cursor = None if after is None else (after[0], session_key(which.tenant, after[1]))
    rows = await store.listings.page(which, limit=limit + 1, after=cursor)
    page: list[dict[str, Any]] = [
        {
            "id": split_key(r.id)[1],
            "compat": r.compat,
            "version": r.version,
            "created_at": r.created_at,
            "updated_at": r.updated_at,
            "open": r.open,
            "needs_action": r.needs_action,
        }
        for r in rows[:limit]
    ]
    more = len(rows) > limit
    return page, ((page[-1]["updated_at"], page[-1]["id"]) if more and page else None)
