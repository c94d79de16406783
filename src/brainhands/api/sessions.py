"""The API's routes on sessions: the tenant's sessions a page at a time, a session as it
stands, a session's document with its history, and a session's erasure."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request

from brainhands.api.bodies import (
    CURSOR,
    DocumentName,
    DocumentOut,
    ErasedOut,
    IncrementOut,
    SessionId,
    SessionPage,
)
from brainhands.api.guard import Guarded, acting, caller, needs
from brainhands.api.known import KnownSessions
from brainhands.api.views import list_sessions, session_document
from brainhands.client.direct import Client
from brainhands.shared.store import SessionFilter
from brainhands.shared.tenancy import session_key


def session_routes(client: Client, known: KnownSessions) -> APIRouter:
    """``GET /sessions``, ``GET /sessions/{id}``, ``DELETE /sessions/{id}`` and
    ``GET /sessions/{id}/documents/{name}``."""
    app = APIRouter(route_class=Guarded)

    @app.get("/sessions", tags=["sessions"], openapi_extra=needs("read"))
    async def sessions(
        request: Request,
        status: Literal["open", "idle"] | None = None,
        needs_action: bool | None = None,
        compat: Annotated[str | None, Query(max_length=64)] = None,
        updated_since: float | None = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        after: Annotated[str | None, Query(pattern=CURSOR)] = None,
    ) -> SessionPage:
        """The tenant's sessions, most recently updated first, a page at a time."""
        which = SessionFilter(
            tenant=caller(request).tenant,
            status=status,
            needs_action=needs_action,
            compat=compat,
            updated_since=updated_since,
        )
        cursor = None
        if after is not None:
            updated_at, _, last_id = after.partition(":")
            cursor = (float(updated_at), last_id)
        page, following = await list_sessions(client.store, which, limit=limit, after=cursor)
        next_cursor = None if following is None else f"{following[0]!r}:{following[1]}"
        return SessionPage(sessions=page, next=next_cursor)

    @app.get("/sessions/{session_id}", tags=["sessions"], openapi_extra=needs("read"))
    async def session(session_id: SessionId, request: Request) -> dict[str, Any]:
        """A session as it stands: entries, submissions, task tree, tool calls with their
        attempts and errors, requests, and the calls waiting for approval."""
        key = session_key(caller(request).tenant, session_id)
        return session_document(await client.session(key))

    @app.get(
        "/sessions/{session_id}/documents/{name}", tags=["sessions"], openapi_extra=needs("read")
    )
    async def document(
        session_id: SessionId,
        name: DocumentName,
        request: Request,
        history: Annotated[int, Query(ge=0, le=1000)] = 100,
    ) -> DocumentOut:
        """A document of the session: its latest value and version, and its latest
        ``history`` writes, each the JSON Patch from the value before it."""
        key = await known.existing(caller(request).tenant, session_id)
        found = await client.document(key, name, history=history)
        doc = found.document
        return DocumentOut(
            name=doc.name,
            version=doc.version,
            kind_version=doc.kind_version,
            value=doc.body,
            history=[IncrementOut(**asdict(i)) for i in found.history],
        )

    @app.delete("/sessions/{session_id}", tags=["sessions"], openapi_extra=needs("admin"))
    async def erase(session_id: SessionId, request: Request, cancel: bool = False) -> ErasedOut:
        """Erase the session and everything it owns: entries, documents and their history,
        tasks, submissions, requests, tool calls with their blobs, workspace versions. The
        erasure is recorded (who, when), not what it held. A session with work open is
        refused (409) unless ``cancel`` is true: then it is erased as it stands."""
        who = caller(request)
        key = session_key(who.tenant, session_id)
        erased = await client.erase(key, cancel=cancel, principal=acting(who))
        return ErasedOut(session_id=session_id, erased_at=erased.erased_at, rows=erased.rows)

    return app
