"""The API's routes for submissions: submit to a session of the key's tenant, read a
submission (or wait for its end), cancel it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.exceptions import HTTPException

from brainhands.api.bodies import (
    CancelOut,
    InputSubmission,
    RequestId,
    SessionId,
    SubmissionOut,
    TextSubmission,
)
from brainhands.api.guard import Guarded, acting, caller, needs
from brainhands.api.known import KnownAgents, KnownSessions
from brainhands.api.long_polls import LongPolls
from brainhands.api.settings import ApiSettings
from brainhands.client.direct import Client
from brainhands.shared.destinations import check_destination
from brainhands.shared.store import SubmissionRecord
from brainhands.shared.tenancy import session_key


def submission_routes(
    client: Client,
    *,
    known: KnownSessions,
    agents: KnownAgents,
    long_polls: LongPolls,
    settings: ApiSettings,
) -> APIRouter:
    """``POST /sessions/{id}/submissions``, ``GET .../submissions/{request_id}`` and its
    ``.../cancel``."""
    app = APIRouter(route_class=Guarded)
    webhook_allow = settings.webhook_allow_list

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
            budget=body.budget.named()
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

    return app


def submission_out(
    record: SubmissionRecord, session_id: str, created: bool | None = None
) -> SubmissionOut:
    """A submission as the API answers it: under the tenant's own session id."""
    return SubmissionOut(
        session_id=session_id,
        request_id=record.request_id,
        status=record.status,
        answer=record.answer,
        error=record.error,
        created=created,
    )
