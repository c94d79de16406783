"""The API's route for an operator's act on a failed undo (``client.compensations``): retry
it, or abandon the compensation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from pydantic import Field

from brainhands.api.bodies import NAME, Closed, SessionId, SignalOut
from brainhands.api.guard import Guarded, acting, caller, needs
from brainhands.api.known import KnownSessions
from brainhands.client.direct import Client
from brainhands.shared.vocabulary import CompensationAction

TaskId = Annotated[str, Path(pattern=NAME, max_length=64)]


class CompensationAct(Closed):
    action: CompensationAction
    """``retry``: run the failed undo again (under a new operation id), then go on;
    ``abandon``: end the task failed, the effects not undone listed in its error."""
    reason: str = Field(min_length=1, max_length=2000)
    """Why: kept with the act, and in the task's error when it abandons."""
    action_id: str | None = Field(default=None, pattern=NAME)
    """The same id twice is one act (default: a random one)."""


def compensation_routes(client: Client, known: KnownSessions, four_eyes: bool) -> APIRouter:
    """``POST /sessions/{id}/compensations/{task_id}``; ``four_eyes``: refused to a key that
    submitted to the session."""
    app = APIRouter(route_class=Guarded)

    @app.post(
        "/sessions/{session_id}/compensations/{task_id}",
        tags=["compensations"],
        openapi_extra=needs("approve"),
    )
    async def act_on_compensation(
        session_id: SessionId, task_id: TaskId, body: CompensationAct, request: Request
    ) -> SignalOut:
        """Act on the failed undo the task waits with (the session ``requires_action``,
        its view's ``compensations``): ``retry`` or ``abandon``, with a reason. 409 when the
        task is not waiting for an act (or for a retry of an effect with no undo to run).
        The same ``action_id`` twice is one act."""
        who = caller(request)
        receipt = await client.act_on_compensation(
            await known.existing(who.tenant, session_id),
            task_id,
            body.action,
            reason=body.reason,
            action_id=body.action_id,
            principal=acting(who),
            four_eyes=four_eyes,
        )
        return SignalOut(signal_id=receipt.signal_id, created=receipt.created)

    return app
