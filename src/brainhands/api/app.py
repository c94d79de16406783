"""The API's routes: every act of the client, over HTTP, for an API key's tenant.

Each route is a thin door onto ``brainhands.Client``: a submit, a cancel, a decision or a
signal is the same durable request the Python client makes, carried out by a Brain, and
recorded as the key's (``key:<id>``), whatever a body says. Session ids are the key's
tenant's own (``shared/tenancy.py``): the same id in two tenants is two sessions, and
nothing a key sends reaches or reveals another tenant's. Every error is answered with an
``application/problem+json`` body saying what is wrong.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from brainhands.api.changes import SessionChanges
from brainhands.api.console import mount_console
from brainhands.api.guard import DEV, Guarded, caller, document_keys, needs
from brainhands.api.keys import Principal, VerifiedKeys
from brainhands.api.known import KnownAgents, KnownSessions
from brainhands.api.live import LiveNotes
from brainhands.api.protect import protect
from brainhands.api.quota import Quotas
from brainhands.api.settings import ApiSettings
from brainhands.api.shared_lists import SharedLists
from brainhands.api.shared_views import SharedViews
from brainhands.api.sse import PING, EventStream, frame
from brainhands.api.stream_tokens import TTL_DEFAULT, TTL_MAX, StreamTokens
from brainhands.api.views import SessionFilter, list_sessions, session_document
from brainhands.api.watcher import Watchers
from brainhands.client.approvals import pending_approvals
from brainhands.client.direct import Client
from brainhands.shared.errors import (
    AnswerTimeout,
    DecisionRefused,
    InvalidRequest,
    NotFoundError,
)
from brainhands.shared.store import SubmissionRecord
from brainhands.shared.tenancy import session_key, split_key
from brainhands.shared.vocabulary import Verdict

log = logging.getLogger("brainhands.api")

PROBLEM = "application/problem+json"
NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""Ids and names a client chooses: 1 to 128 plain characters."""

CURSOR = r"^[0-9]{1,12}(\.[0-9]{1,9})?:[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"
"""A page cursor: the last page's ``updated_at:id``."""

SessionId = Annotated[str, Path(pattern=NAME, max_length=64)]
StreamToken = Annotated[
    str | None,
    Query(max_length=2048, description="a stream token (POST /stream-tokens), for EventSource"),
]
"""Read by the route's guard, before the route runs: declared for the document."""
RequestId = Annotated[str, Path(pattern=NAME, max_length=128)]
ApprovalId = Annotated[str, Path(pattern=NAME, max_length=64)]


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Callback(Closed):
    callback_url: str | None = Field(
        default=None, max_length=2000, pattern=r"^https?://[^\s/?#]+[^\s]*$"
    )
    """Where the submission's end is posted (JSON, signed ``X-Brainhands-Signature``,
    ``Idempotency-Key`` the submission's id), at least once, retried with backoff."""


class TextSubmission(Callback):
    """A message, for an agent."""

    text: str = Field(max_length=100_000)
    agent: str = Field(pattern=NAME)
    """The agent the message is for: one the deployment's Brains serve."""
    request_id: str | None = Field(default=None, pattern=NAME)
    """The same id never starts a second run (default: a random one)."""


class InputSubmission(Callback):
    """A submission's input as it is, e.g. ``{"kind": ..., "input": ...}`` for a task."""

    input: dict[str, Any]
    request_id: str | None = Field(default=None, pattern=NAME)
    """The same id never starts a second run (default: a random one)."""


class DecisionBody(Closed):
    by: str | None = Field(default=None, min_length=1, max_length=128)
    """A name shown with the decision (default: the API key's name); who decided is
    recorded from the key, as ``principal``."""
    reason: str | None = Field(default=None, max_length=2000)
    decision_id: str | None = Field(default=None, pattern=NAME)


class DenyBody(DecisionBody):
    reason: str = Field(min_length=1, max_length=2000)


class SignalBody(Closed):
    name: str = Field(pattern=NAME)
    payload: Any = None
    signal_id: str | None = Field(default=None, pattern=NAME)
    decision: bool = False
    """For a wait declared a decision (``WaitSignal(..., decision=True)``): needs a key
    that may approve."""


class SubmissionOut(BaseModel):
    session_id: str
    request_id: str
    status: str
    answer: Any = None
    error: str | None = None
    created: bool | None = None
    """On submit: False when this request id was submitted before (nothing new started)."""


class DecisionOut(BaseModel):
    approval_id: str
    verdict: str
    by: str
    reason: str | None
    decision_id: str
    decided_at: float
    new: bool
    principal: str | None
    """Who decided, as their credential says (``key:<id>``)."""


class StreamTokenBody(Closed):
    session_id: str | None = Field(default=None, pattern=NAME, max_length=64)
    """The one session whose events it opens (default: any of the tenant's, and the list)."""
    ttl: int = Field(default=TTL_DEFAULT, ge=1, le=TTL_MAX)
    """Seconds it is good for."""


class StreamTokenOut(BaseModel):
    token: str
    """For ``?token=`` of ``/sessions/{id}/events`` and ``/events``: reads, nothing else."""
    expires_at: float


class SignalOut(BaseModel):
    signal_id: str
    created: bool


class CancelOut(BaseModel):
    status: str


class Problem(BaseModel):
    """What is wrong with a request (RFC 9457 ``application/problem+json``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[dict[str, str]] | None = None
    """For invalid input: each field (``where``) and what is wrong with it."""


PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "content": {PROBLEM: {}}, "description": what}
    for status, what in (
        (400, "the body could not be read (not JSON, or not in the encoding it claims)"),
        (401, "no API key, or an unknown, revoked or malformed one"),
        (403, "the key lacks the scope this needs, or the request's Host is not served"),
        (404, "no such session, submission or approval (for this key's tenant)"),
        (409, "the call was already decided otherwise, or is no longer pending"),
        (413, "the request body is larger than the configured limit"),
        (422, "malformed JSON, unknown fields or invalid values"),
        (429, "the key is over its request rate or its open streams (see Retry-After)"),
        (500, "the API failed; the problem names the request to report"),
    )
}


class SessionPage(BaseModel):
    sessions: list[dict[str, Any]]
    next: str | None
    """The cursor of the next page (``?after=``), or None on the last."""


def problem(status: int, title: str, detail: str, **extra: Any) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


def submission_out(
    record: SubmissionRecord, session_id: str, created: bool | None = None
) -> SubmissionOut:
    return SubmissionOut(
        session_id=session_id,
        request_id=record.request_id,
        status=record.status,
        answer=record.answer,
        error=record.error,
        created=created,
    )


def acting(who: Principal) -> str:
    """What a key's acts are recorded as."""
    return f"key:{who.key_id}" if who is not DEV else "dev"


def create_app(
    client: Client, changes: SessionChanges, live: LiveNotes, settings: ApiSettings
) -> FastAPI:
    app = FastAPI(
        title="brainhands",
        summary="Durable tool-using agents: submit, watch, approve, signal.",
        version="1",
        responses=PROBLEMS,
        openapi_url="/openapi.json" if settings.api_docs else None,
    )
    app.router.route_class = Guarded
    document_keys(app)
    protect(app, settings)
    app.state.client, app.state.settings = client, settings
    app.state.keys = VerifiedKeys(client.store)
    secret = settings.api_token_secret
    app.state.stream_tokens = tokens = StreamTokens(
        secret.get_secret_value().encode() if secret else secrets.token_bytes(32)
    )
    app.state.quotas = quotas = Quotas(
        rate=settings.api_rate, burst=settings.api_burst, max_streams=settings.api_max_streams
    )
    store = client.store
    mount_console(app)
    views = SharedViews(client, changes)
    lists = SharedLists(store, changes)
    app.state.watchers = watchers = Watchers()
    known = KnownSessions(store)
    agents = KnownAgents(store, settings.api_compat)

    async def existing(session_id: str, who: Principal) -> str:
        """The store key of the caller's session ``session_id``; 404 if it has none."""
        key = session_key(who.tenant, session_id)
        if not await known.exists(key):
            raise NotFoundError(f"session {session_id} does not exist")
        return key

    # Problems ------------------------------------------------------------------------------

    @app.exception_handler(HTTPException)
    async def http_problem(request: Request, exc: HTTPException) -> Response:
        titles = {
            400: "Bad Request",
            401: "Unauthorized",
            403: "Forbidden",
            404: "Not Found",
            405: "Not Allowed",
            429: "Too Many Requests",
        }
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else {}
        headers.update(exc.headers or {})
        response = problem(exc.status_code, titles.get(exc.status_code, "Error"), str(exc.detail))
        response.headers.update(headers)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = [
            {"where": ".".join(str(p) for p in e["loc"]), "problem": e["msg"]} for e in exc.errors()
        ]
        detail = "; ".join(f"{e['where']}: {e['problem']}" for e in errors)
        return problem(422, "Invalid Request", detail, errors=errors)

    @app.exception_handler(NotFoundError)
    async def not_found(request: Request, exc: NotFoundError) -> Response:
        # Said of the store's key: said to the tenant of its own id.
        who: Principal | None = getattr(request.state, "principal", None)
        detail = str(exc) if who is None else str(exc).replace(f"{who.tenant}/", "")
        return problem(404, "Not Found", detail)

    @app.exception_handler(DecisionRefused)
    async def refused(request: Request, exc: DecisionRefused) -> Response:
        return problem(409, "Conflict", str(exc))

    @app.exception_handler(InvalidRequest)
    async def bad_request(request: Request, exc: InvalidRequest) -> Response:
        return problem(422, "Invalid Request", str(exc))

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> Response:
        incident = uuid.uuid4().hex[:12]
        log.error(
            "request failed",
            exc_info=exc,
            extra={"event": "request_failed", "incident": incident, "path": request.url.path},
        )
        detail = f"the API failed on this request; report incident {incident}"
        return problem(500, "Internal Server Error", detail, incident=incident)

    # Health --------------------------------------------------------------------------------

    @app.get("/healthz", response_class=PlainTextResponse, tags=["health"])
    async def healthz() -> str:
        return "ok"

    @app.get("/readyz", response_class=PlainTextResponse, tags=["health"])
    async def readyz() -> Response:
        ready = client.broker.connected and await store.ping()
        return PlainTextResponse("ready" if ready else "not ready", 200 if ready else 503)

    @app.get(
        "/metrics", response_class=PlainTextResponse, tags=["health"], openapi_extra=needs("admin")
    )
    async def metrics() -> Response:
        """The API process's Prometheus metrics, for an ``admin`` key."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    # Submissions ---------------------------------------------------------------------------

    @app.post(
        "/sessions/{session_id}/submissions", tags=["submissions"], openapi_extra=needs("submit")
    )
    async def submit(
        session_id: SessionId,
        body: TextSubmission | InputSubmission,
        request: Request,
        wait: Annotated[float, Query(ge=0, le=60)] = 0,
    ) -> SubmissionOut:
        """Submit to a session of the key's tenant (created on first contact), once per
        request id; a Brain starts (or, mid-run, joins) its work. The body is a message
        (``text``, for ``agent``) or an ``input`` as it is. ``wait`` seconds: answer once
        the submission has ended (or with its status then), in this one request."""
        who = caller(request)
        key = session_key(who.tenant, session_id)
        if isinstance(body, TextSubmission):
            served = await agents.names(body.agent)
            if served and body.agent not in served:  # none declared yet: a Brain will say
                raise HTTPException(
                    400,
                    f"no agent {body.agent!r} in this deployment; its Brains "
                    f"({settings.api_compat}) serve: {', '.join(sorted(served))}",
                )
        if body.callback_url is not None and settings.webhook_secret is None:
            raise HTTPException(
                400, "this deployment posts no webhooks: it has no BRAINHANDS_WEBHOOK_SECRET"
            )
        handle = await client.submit(
            key,
            body.text if isinstance(body, TextSubmission) else body.input,
            request_id=body.request_id,
            agent=body.agent if isinstance(body, TextSubmission) else None,
            principal=acting(who),
            callback_url=body.callback_url,
        )
        known.learn(key)
        if wait:
            record = await _waited(key, handle.request_id, wait)
            return submission_out(record, session_id, handle.created)
        if handle.created:  # committed just now, queued: nothing to read back
            return SubmissionOut(
                session_id=session_id, request_id=handle.request_id, status="queued", created=True
            )
        return submission_out(await handle.status(), session_id, created=False)

    async def _waited(key: str, request_id: str, wait: float) -> SubmissionRecord:
        try:  # its first read returns at once a submission that has ended
            return await client.wait(key, request_id, timeout=wait)
        except AnswerTimeout as still:
            record: SubmissionRecord = still.record
            return record

    @app.get(
        "/sessions/{session_id}/submissions/{request_id}",
        tags=["submissions"],
        openapi_extra=needs("read"),
    )
    async def submission(
        session_id: SessionId,
        request_id: RequestId,
        request: Request,
        wait: Annotated[float, Query(ge=0, le=60)] = 0,
    ) -> SubmissionOut:
        """A submission's status and answer; ``wait`` seconds: until it has ended."""
        key = session_key(caller(request).tenant, session_id)
        if not wait:
            record = await client.submission(key, request_id).status()
        else:
            record = await _waited(key, request_id, wait)
        return submission_out(record, session_id)

    @app.post(
        "/sessions/{session_id}/submissions/{request_id}/cancel",
        tags=["submissions"],
        openapi_extra=needs("submit"),
    )
    async def cancel(session_id: SessionId, request_id: RequestId, request: Request) -> CancelOut:
        """Request the cancellation of a submission; a Brain carries it out."""
        key = session_key(caller(request).tenant, session_id)
        return CancelOut(status=await client.cancel(key, request_id))

    # Sessions ------------------------------------------------------------------------------

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
        page, following = await list_sessions(store, which, limit=limit, after=cursor)
        next_cursor = None if following is None else f"{following[0]!r}:{following[1]}"
        return SessionPage(sessions=page, next=next_cursor)

    @app.get("/sessions/{session_id}", tags=["sessions"], openapi_extra=needs("read"))
    async def session(session_id: SessionId, request: Request) -> dict[str, Any]:
        """A session as it stands: entries, submissions, task tree, tool calls with their
        attempts and errors, requests, and the calls waiting for approval."""
        key = session_key(caller(request).tenant, session_id)
        return session_document(await client.session(key))

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
        (``event: progress``), a model's text as it comes (``event: model``)."""
        who = caller(request)
        key = await existing(session_id, who)
        seen = _version(last_event_id)
        return EventStream(_stream(key, seen), release=quotas.open_stream(who.key_id))

    async def _stream(key: str, seen: int | None) -> AsyncIterator[bytes]:
        with watchers.open() as watcher, views.watch(key, watcher), live.watch(key, watcher):
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
        return EventStream(_list_stream(who.tenant), release=release)

    async def _list_stream(tenant: str) -> AsyncIterator[bytes]:
        sent = None
        with watchers.open() as watcher, lists.watch(tenant, watcher):
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

    @app.post("/stream-tokens", tags=["sessions"], openapi_extra=needs("read"))
    async def stream_token(request: Request, body: StreamTokenBody | None = None) -> StreamTokenOut:
        """A short-lived token that opens event streams in ``?token=``, for a browser's
        ``EventSource``, which sends no ``Authorization`` header. It reads, nothing else,
        for this key's tenant (or one session), and stops working with the key."""
        body = body or StreamTokenBody()
        made, expires_at = tokens.mint(caller(request).key_id, body.session_id, body.ttl)
        return StreamTokenOut(token=made, expires_at=expires_at)

    # Approvals and signals -----------------------------------------------------------------

    @app.get("/approvals", tags=["approvals"], openapi_extra=needs("read"))
    async def approvals(
        request: Request,
        session_id: Annotated[str | None, Query(pattern=NAME, max_length=64)] = None,
    ) -> list[dict[str, Any]]:
        """Calls waiting for a decision, oldest first (of one session, or of the tenant)."""
        who = caller(request)
        if session_id is not None:
            pending = await pending_approvals(store, await existing(session_id, who))
        else:
            pending = await pending_approvals(store, tenant=who.tenant)
        return [{**asdict(p), "session_id": split_key(p.session_id)[1]} for p in pending]

    async def _decide(
        session_id: str, approval_id: str, request: Request, verdict: Verdict, body: DecisionBody
    ) -> DecisionOut:
        who = caller(request)
        [made] = await client.decide(
            await existing(session_id, who),
            [approval_id],
            verdict,
            by=body.by or who.name,
            reason=body.reason,
            decision_id=body.decision_id,
            principal=acting(who),
            four_eyes=settings.api_four_eyes,
        )
        return DecisionOut(**asdict(made))

    @app.post(
        "/sessions/{session_id}/approvals/{approval_id}/approve",
        tags=["approvals"],
        openapi_extra=needs("approve"),
    )
    async def approve(
        session_id: SessionId,
        approval_id: ApprovalId,
        request: Request,
        body: DecisionBody | None = None,
    ) -> DecisionOut:
        """Approve a call: it is dispatched once. The same decision twice counts once."""
        return await _decide(session_id, approval_id, request, "approved", body or DecisionBody())

    @app.post(
        "/sessions/{session_id}/approvals/{approval_id}/deny",
        tags=["approvals"],
        openapi_extra=needs("approve"),
    )
    async def deny(
        session_id: SessionId, approval_id: ApprovalId, request: Request, body: DenyBody
    ) -> DecisionOut:
        """Deny a call: the model reads the refusal with its reason; the tool never runs."""
        return await _decide(session_id, approval_id, request, "denied", body)

    @app.post("/sessions/{session_id}/signals", tags=["signals"], openapi_extra=needs("signal"))
    async def signal(session_id: SessionId, body: SignalBody, request: Request) -> SignalOut:
        """Send a signal: the task waiting for its name resumes with the payload; kept
        until one waits. The same signal id twice is one signal. A ``decision`` (for a
        wait declared one) needs the ``approve`` scope too."""
        who = caller(request)
        if body.decision and not who.may("approve"):
            raise HTTPException(403, "a decision needs a key with the 'approve' scope")
        receipt = await client.signal(
            await existing(session_id, who),
            body.name,
            body.payload,
            signal_id=body.signal_id,
            decision=body.decision,
            principal=acting(who),
        )
        return SignalOut(signal_id=receipt.request.key, created=receipt.created)

    return app


def _version(last_event_id: str | None) -> int | None:
    if last_event_id is None or last_event_id == "":
        return None
    try:
        return int(last_event_id)
    except ValueError:
        raise InvalidRequest("Last-Event-ID: not an event id of this stream") from None
