"""The API's routes: every act of the client, over HTTP, for an API key's tenant.

Each route is a thin door onto ``brainhands.Client``: a submit, a cancel, a decision or a
signal is the same durable request the Python client makes, carried out by a Brain, and
recorded as the key's (``key:<id>``), whatever a body says. Session ids are the key's
tenant's own (``shared/tenancy.py``): the same id in two tenants is two sessions, and
nothing a key sends reaches or reveals another tenant's. Every error is answered with an
``application/problem+json`` body saying what is wrong.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException

from brainhands.api.bodies import (
    CURSOR,
    NAME,
    ApprovalId,
    BudgetLimits,
    BudgetRaise,
    CancelOut,
    DecisionBody,
    DecisionOut,
    DenyBody,
    DocumentName,
    DocumentOut,
    IncrementOut,
    InputSubmission,
    RequestId,
    SessionId,
    SessionPage,
    SignalBody,
    SignalOut,
    SubmissionOut,
    TextSubmission,
)
from brainhands.api.changes import SessionChanges
from brainhands.api.compensations import compensation_routes
from brainhands.api.console import mount_console
from brainhands.api.guard import DEV, Guarded, caller, document_keys, needs, still_valid
from brainhands.api.keys import Principal, VerifiedKeys
from brainhands.api.known import KnownAgents, KnownSessions
from brainhands.api.live import LiveNotes
from brainhands.api.long_polls import LongPolls
from brainhands.api.problems import PROBLEMS, answer_problems
from brainhands.api.protect import protect
from brainhands.api.quota import Quotas
from brainhands.api.settings import ApiSettings
from brainhands.api.shared_lists import SharedLists
from brainhands.api.shared_views import SharedViews
from brainhands.api.stream_tokens import StreamTokens
from brainhands.api.streams import stream_routes
from brainhands.api.tenants import tenant_routes
from brainhands.api.views import list_sessions, session_document
from brainhands.api.watcher import Watchers
from brainhands.client.approvals import pending_approvals
from brainhands.client.direct import Client
from brainhands.shared.destinations import check_destination
from brainhands.shared.store import SessionFilter, SubmissionRecord
from brainhands.shared.tenancy import session_key, split_key
from brainhands.shared.vocabulary import Verdict


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
        openapi_url=None,  # served below, for a key, when turned on
        docs_url=None,  # its pages load their code from elsewhere: none is served
        redoc_url=None,
    )
    app.router.route_class = Guarded
    document_keys(app)
    protect(app, settings)
    app.state.client, app.state.settings = client, settings
    app.state.keys = keys = VerifiedKeys(client.store)
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
    app.state.watchers = watchers = Watchers(valid=partial(still_valid, keys))
    long_polls = LongPolls(client, changes, watchers, quotas)
    known = KnownSessions(store)
    agents = KnownAgents(store, settings.api_compat)
    webhook_allow = settings.webhook_allow_list

    answer_problems(app)

    # Health --------------------------------------------------------------------------------

    @app.get("/healthz", response_class=PlainTextResponse, tags=["health"])
    async def healthz() -> str:
        return "ok"

    @app.get("/readyz", response_class=PlainTextResponse, tags=["health"])
    async def readyz() -> Response:
        ready = client.broker.connected and await store.ping()
        return PlainTextResponse("ready" if ready else "not ready", 200 if ready else 503)

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        tags=["health"],
        openapi_extra=needs("operator"),
    )
    async def metrics() -> Response:
        """The API process's Prometheus metrics, for an ``operator`` key: they count every
        tenant's requests, so no tenant's key reads them."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    if settings.api_docs:

        @app.get("/openapi.json", include_in_schema=False, openapi_extra=needs("read"))
        async def openapi() -> JSONResponse:
            """The OpenAPI document, for any key of the deployment."""
            return JSONResponse(app.openapi())

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
        if isinstance(body, InputSubmission) and not who.may("tasks"):
            raise HTTPException(
                403, "a task kind's raw input needs a key with the 'tasks' scope too"
            )
        if isinstance(body, TextSubmission):
            served = await agents.names(body.agent)
            if served and body.agent not in served:  # none declared yet: a Brain will say
                raise HTTPException(
                    400,
                    f"no agent {body.agent!r} in this deployment; its Brains "
                    f"({settings.api_compat}) serve: {', '.join(sorted(served))}",
                )
        if body.callback_url is not None:
            if settings.webhook_secret is None:
                raise HTTPException(
                    400, "this deployment posts no webhooks: it has no BRAINHANDS_WEBHOOK_SECRET"
                )
            check_destination(body.callback_url, webhook_allow)
        handle = await client.submit(
            key,
            body.text if isinstance(body, TextSubmission) else body.input,
            request_id=body.request_id,
            agent=body.agent if isinstance(body, TextSubmission) else None,
            principal=acting(who),
            callback_url=body.callback_url,
            budget=_limits(body.budget)
            if isinstance(body, TextSubmission) and body.budget
            else None,
        )
        known.learn(key)
        if wait:
            record = await long_polls.wait(who, key, handle.request_id, wait)
            return submission_out(record, session_id, handle.created)
        if handle.created:  # committed just now, queued: nothing to read back
            return SubmissionOut(
                session_id=session_id, request_id=handle.request_id, status="queued", created=True
            )
        return submission_out(await handle.status(), session_id, created=False)

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
        """A submission's status and answer; ``wait`` seconds: until it has ended (the
        request then holds one of the key's open streams)."""
        who = caller(request)
        key = session_key(who.tenant, session_id)
        if not wait:
            record = await client.submission(key, request_id).status()
        else:
            record = await long_polls.wait(who, key, request_id, wait)
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

    app.include_router(
        stream_routes(
            known=known,
            views=views,
            lists=lists,
            changes=changes,
            live=live,
            watchers=watchers,
            quotas=quotas,
            tokens=tokens,
        )
    )

    # Approvals and signals -----------------------------------------------------------------

    @app.get("/approvals", tags=["approvals"], openapi_extra=needs("read"))
    async def approvals(
        request: Request,
        session_id: Annotated[str | None, Query(pattern=NAME, max_length=64)] = None,
    ) -> list[dict[str, Any]]:
        """Calls waiting for a decision, oldest first (of one session, or of the tenant)."""
        who = caller(request)
        if session_id is not None:
            pending = await pending_approvals(store, await known.existing(who.tenant, session_id))
        else:
            pending = await pending_approvals(store, tenant=who.tenant)
        return [{**asdict(p), "session_id": split_key(p.session_id)[1]} for p in pending]

    async def _decide(
        session_id: str, approval_id: str, request: Request, verdict: Verdict, body: DecisionBody
    ) -> DecisionOut:
        who = caller(request)
        [made] = await client.decide(
            await known.existing(who.tenant, session_id),
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
            await known.existing(who.tenant, session_id),
            body.name,
            body.payload,
            signal_id=body.signal_id,
            decision=body.decision,
            principal=acting(who),
            four_eyes=settings.api_four_eyes,
        )
        return SignalOut(signal_id=receipt.signal_id, created=receipt.created)

    @app.post("/sessions/{session_id}/budget", tags=["budgets"], openapi_extra=needs("approve"))
    async def raise_budget(session_id: SessionId, body: BudgetRaise, request: Request) -> SignalOut:
        """Raise the budget of the session's agent run stopped at it (``budget_exhausted``):
        the limits named are set to the values given, the others kept, and the run resumes.
        409 when no run of the session is stopped at its budget: a raise lifts the stop it
        was sent for and is never kept for a later one. The same ``raise_id`` twice is one
        raise."""
        who = caller(request)
        receipt = await client.raise_budget(
            await known.existing(who.tenant, session_id),
            principal=acting(who),
            raise_id=body.raise_id,
            four_eyes=settings.api_four_eyes,
            **_limits(body),
        )
        return SignalOut(signal_id=receipt.signal_id, created=receipt.created)

    app.include_router(compensation_routes(client, known, acting, settings.api_four_eyes))
    app.include_router(tenant_routes(client, acting))
    return app


def _limits(body: BudgetLimits) -> dict[str, float]:
    """The limits a body sets (those left out are not null but absent)."""
    return body.model_dump(exclude_none=True, include=set(BudgetLimits.model_fields))
