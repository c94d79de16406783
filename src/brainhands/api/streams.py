"""The API's event streams (server-sent events): a session's views and live notes, the
sessions list, and the short-lived tokens that open them from a browser's ``EventSource``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Request

from brainhands.api.bodies import SessionId, StreamToken, StreamTokenBody, StreamTokenOut
from brainhands.api.changes import SessionChanges
from brainhands.api.guard import Guarded, caller, needs
from brainhands.api.keys import Principal
from brainhands.api.known import KnownSessions
from brainhands.api.live import LiveNotes
from brainhands.api.quota import Quotas
from brainhands.api.shared_lists import SharedLists
from brainhands.api.shared_views import SharedViews
from brainhands.api.sse import PING, EventStream, frame
from brainhands.api.stream_tokens import StreamTokens
from brainhands.api.watcher import Watchers
from brainhands.shared.errors import InvalidRequest
from brainhands.shared.tenancy import split_key


def stream_routes(
    *,
    known: KnownSessions,
    views: SharedViews,
    lists: SharedLists,
    changes: SessionChanges,
    live: LiveNotes,
    watchers: Watchers,
    quotas: Quotas,
    tokens: StreamTokens,
) -> APIRouter:
    """The routes that stream: ``/sessions/{id}/events``, ``/events`` and ``/stream-tokens``."""
    app = APIRouter(route_class=Guarded)

    @app.get(
        "/sessions/{session_id}/events",
        tags=["sessions"],
        response_class=EventStream,
        status_code=200,
        responses={200: {"content": {"text/event-stream": {}}}},
        openapi_extra=needs("read", stream_token=True),
    )
    async def events(
        session_id: SessionId,
        request: Request,
        last_event_id: Annotated[str | None, Header()] = None,
        token: StreamToken = None,
    ) -> EventStream:
        """Server-sent events: the session's view now, then again at every commit
        (``event: view``). Each view's id is the session's version; reconnect with
        ``Last-Event-ID`` and the stream resumes after it (nothing repeated, the current
        state at once). Between them, live notes that are never stored: a tool's progress
        (``event: progress``), a model's text as it comes (``event: model``). It ends when
        its key is revoked or its stream token expires."""
        who = caller(request)
        key = await known.existing(who.tenant, session_id)
        seen = _version(last_event_id)
        stream = _session_stream(
            who, key, seen, watchers=watchers, views=views, live=live, changes=changes
        )
        return EventStream(stream, release=quotas.open_stream(who.key_id))

    @app.get(
        "/events",
        tags=["sessions"],
        response_class=EventStream,
        status_code=200,
        responses={200: {"content": {"text/event-stream": {}}}},
        openapi_extra=needs("read", stream_token=True),
    )
    async def session_list_events(request: Request, token: StreamToken = None) -> EventStream:
        """Server-sent events of the sessions list: the tenant's latest sessions now, then
        again whenever one of them is created or changes (``event: sessions``)."""
        who = caller(request)
        release = quotas.open_stream(who.key_id)
        return EventStream(_list_stream(who, watchers=watchers, lists=lists), release=release)

    @app.post("/stream-tokens", tags=["sessions"], openapi_extra=needs("read"))
    async def stream_token(request: Request, body: StreamTokenBody | None = None) -> StreamTokenOut:
        """A short-lived token that opens event streams in ``?token=``, for a browser's
        ``EventSource``, which sends no ``Authorization`` header. It reads, nothing else,
        for this key's tenant (or one session), and stops working with the key."""
        body = body or StreamTokenBody()
        made, expires_at = tokens.mint(caller(request).key_id, body.session_id, body.ttl)
        return StreamTokenOut(token=made, expires_at=expires_at)

    return app


def _version(last_event_id: str | None) -> int | None:
    if last_event_id is None or last_event_id == "":
        return None
    try:
        return int(last_event_id)
    except ValueError:
        raise InvalidRequest("Last-Event-ID: not an event id of this stream") from None


async def _session_stream(
    who: Principal,
    key: str,
    seen: int | None,
    *,
    watchers: Watchers,
    views: SharedViews,
    live: LiveNotes,
    changes: SessionChanges,
) -> AsyncIterator[bytes]:
    """A session's stream: its view after ``seen`` (its version), then at every commit, and
    the live notes between them, until its watcher is closed."""
    with watchers.open(who) as watcher, views.watch(key, watcher), live.watch(key, watcher):
        while True:
            snapshot = await views.read(key)
            if seen is None or snapshot.version > seen:
                yield snapshot.frame
                seen = snapshot.version
            # Until the next commit, pass on the live notes (no id: they are not part of
            # what a reconnecting watcher resumes).
            while True:
                news = await watcher.next()
                if news == "closed":
                    return
                if news == "changed":
                    break
                if news == "ping":
                    yield PING
                    if not changes.pushed:
                        break  # without notifications, look anyway
                    continue
                note = news.model_copy(update={"session_id": split_key(key)[1]})
                yield frame(note.model_dump_json(), event=news.kind)


async def _list_stream(
    who: Principal, *, watchers: Watchers, lists: SharedLists
) -> AsyncIterator[bytes]:
    """The tenant's sessions list now, then whenever one of them changes, until its watcher
    is closed."""
    sent, tenant = None, who.tenant
    with watchers.open(who) as watcher, lists.watch(tenant, watcher):
        while True:
            event = await lists.read(tenant)
            if event != sent:
                yield event
                sent = event
            news = await watcher.next()
            if news == "closed":
                return
            if news == "ping":
                yield PING
