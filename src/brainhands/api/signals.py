"""The API's routes that send a running session what it waits for: a signal, or a raise of
the budget its run stopped at."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.exceptions import HTTPException

from brainhands.api.bodies import BudgetRaise, SessionId, SignalBody, SignalOut
from brainhands.api.guard import Guarded, acting, caller, needs
from brainhands.api.known import KnownSessions
from brainhands.client.direct import Client


def signal_routes(client: Client, known: KnownSessions, four_eyes: bool) -> APIRouter:
    """``POST /sessions/{id}/signals`` and ``POST /sessions/{id}/budget``; ``four_eyes``: a
    decision signal or a raise is refused to a key that submitted to the session."""
    app = APIRouter(route_class=Guarded)

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
            four_eyes=four_eyes,
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
            four_eyes=four_eyes,
            **body.named(),
        )
        return SignalOut(signal_id=receipt.signal_id, created=receipt.created)

    return app
