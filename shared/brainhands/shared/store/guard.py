"""The session guard: every commit's first write, and what a refused one means.

``UPDATE session ... WHERE version = :v AND fence = :t`` bumps the version and reserves the
entry sequence numbers; the first commit of a holder whose claim was deferred
(``Draft.claims_fence``) claims the fence in it instead (``fence < :t``, set to ``:t``).
It locks the session's row until the commit ends, so the commits of one session are
serialized and entry ``seq`` stays gap-free; a guard that matches no row refuses the commit
before anything of it is written. On PostgreSQL the guard also notifies
(``pg_notify`` in its ``RETURNING``, delivered when the transaction commits, and only then).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.engine import Connection

from brainhands.shared.errors import ConflictError, NotFoundError, StaleLeaseError
from brainhands.shared.keys import session_resource
from brainhands.shared.store import schema
from brainhands.shared.store.draft import Draft
from brainhands.shared.store.records import FINAL_SUBMISSION_STATUSES

SESSION_CHANNEL = "brainhands_sessions"
"""The PostgreSQL channel every commit notifies (payload: the session id): what the API's
event streams hear."""
ANSWER_CHANNEL = "brainhands_answers"
"""The PostgreSQL channel a commit that ends a submission notifies (payload: the session id),
so that a waiting client re-reads it at once instead of polling."""

_s = schema.session
GUARD = (
    update(_s)
    .where(
        _s.c.id == bindparam("g_id"),
        _s.c.version == bindparam("g_version"),
        _s.c.fence.between(
            bindparam("g_fence_low", type_=_s.c.fence.type),
            bindparam("g_fence_high", type_=_s.c.fence.type),
        ),
    )
    .values(
        fence=bindparam("g_fence", type_=_s.c.fence.type),
        version=_s.c.version + 1,
        entry_count=_s.c.entry_count + bindparam("g_entries", type_=_s.c.entry_count.type),
        updated_at=bindparam("g_now", type_=_s.c.updated_at.type),
    )
)
"""The guard, without its ``RETURNING``; its parameters: ``guard_params``."""


def guard_params(draft: Draft, now: float) -> dict[str, Any]:
    return {
        "g_id": draft.session_id,
        "g_version": draft.version,
        "g_fence": draft.fence,
        # A claim: any fence below the token; else the token itself.
        "g_fence_low": -1 if draft.claims_fence else draft.fence,
        "g_fence_high": draft.fence - 1 if draft.claims_fence else draft.fence,
        "g_entries": len(draft.entries),
        "g_now": now,
    }


def notifications(answers: bool) -> list[Any]:
    """The guard's ``RETURNING`` terms that notify (``answers``: also ``ANSWER_CHANNEL``)."""
    terms = [func.pg_notify(SESSION_CHANNEL, _s.c.id).label("n_session")]
    if answers:
        terms.append(func.pg_notify(ANSWER_CHANNEL, _s.c.id).label("n_answer"))
    return terms


def ends_submission(draft: Draft) -> bool:
    """Whether ``draft`` ends a submission (its commit then notifies ``ANSWER_CHANNEL``)."""
    changes = [u.changes for u in draft.submission_updates]
    changes += [j.changes for j in draft.joined_answers]
    return any(c.get("status") in FINAL_SUBMISSION_STATUSES for c in changes)


def raise_guard_failure(conn: Connection, draft: Draft) -> None:
    """The guard of ``draft`` matched no row: raise why (missing, stale fence, old version)."""
    row = (
        conn.execute(select(_s.c.version, _s.c.fence).where(_s.c.id == draft.session_id))
    ).one_or_none()
    if row is None:
        raise NotFoundError(f"session {draft.session_id} does not exist")
    if row.fence >= draft.fence if draft.claims_fence else row.fence != draft.fence:
        raise StaleLeaseError(session_resource(draft.session_id), draft.fence, row.fence)
    raise ConflictError(
        f"session {draft.session_id} is at version {row.version}, the draft was read at "
        f"{draft.version}"
    )
