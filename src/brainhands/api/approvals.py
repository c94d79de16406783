"""The API's routes for approvals: the calls waiting for a decision, and a decision on one
(approve or deny)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from brainhands.api.bodies import (
    NAME,
    ApprovalId,
    ApproveBody,
    DecisionBody,
    DecisionOut,
    DenyBody,
    SessionId,
)
from brainhands.api.guard import Guarded, acting, caller, needs
from brainhands.api.known import KnownSessions
from brainhands.client.approvals import pending_approvals
from brainhands.client.direct import Client
from brainhands.shared.tenancy import split_key
from brainhands.shared.vocabulary import Verdict


def approval_routes(client: Client, known: KnownSessions, four_eyes: bool) -> APIRouter:
    """``GET /approvals`` and ``POST /sessions/{id}/approvals/{approval_id}/approve`` or
    ``/deny``; ``four_eyes``: a decision is refused to a key that submitted to the session."""
    app = APIRouter(route_class=Guarded)

    @app.get("/approvals", tags=["approvals"], openapi_extra=needs("read"))
    async def approvals(
        request: Request,
        session_id: Annotated[str | None, Query(pattern=NAME, max_length=64)] = None,
    ) -> list[dict[str, Any]]:
        """Calls waiting for a decision, oldest first (of one session, or of the tenant)."""
        who = caller(request)
        if session_id is not None:
            key = await known.existing(who.tenant, session_id)
            pending = await pending_approvals(client.store, key)
        else:
            pending = await pending_approvals(client.store, tenant=who.tenant)
        return [{**asdict(p), "session_id": split_key(p.session_id)[1]} for p in pending]

    async def decide(
        session_id: str,
        approval_id: str,
        request: Request,
        verdict: Verdict,
        body: DecisionBody,
        arguments: dict[str, Any] | None = None,
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
            four_eyes=four_eyes,
            arguments=arguments,
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
        body: ApproveBody | None = None,
    ) -> DecisionOut:
        """Approve a call: it is dispatched once, with ``arguments`` when the body edits
        them (422 when they do not fit the tool's schema). The same decision twice counts
        once."""
        body = body or ApproveBody()
        return await decide(session_id, approval_id, request, "approved", body, body.arguments)

    @app.post(
        "/sessions/{session_id}/approvals/{approval_id}/deny",
        tags=["approvals"],
        openapi_extra=needs("approve"),
    )
    async def deny(
        session_id: SessionId, approval_id: ApprovalId, request: Request, body: DenyBody
    ) -> DecisionOut:
        """Deny a call: the model reads the refusal with its reason; the tool never runs."""
        return await decide(session_id, approval_id, request, "denied", body)

    return app
