"""Submitting input to a session at the store, and polling the store for its answer: for
tests and benches that run a deployment without a ``Client`` (one with no broker, or whose
measurement must not include the Client's own publish). Applications use
``brainhands.Client``, which does the same and publishes the wake-up at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from brainhands.shared.errors import BrainhandsError
from brainhands.shared.messages import SessionWake, encode
from brainhands.shared.statuses import FINAL_SUBMISSION_STATUSES
from brainhands.shared.store import OutboxMessage, Store, SubmissionRecord, SubmitReceipt
from brainhands.shared.topology import Topology
from brainhands.shared.tracing import current_carrier, tracer


async def submit_input(
    store: Store,
    topology: Topology,
    *,
    session_id: str,
    request_id: str,
    input: Any,
    compat: str,
) -> SubmitReceipt:
    """Accept ``input`` once per ``request_id`` and wake the session's Brains (those of
    ``compat`` for a new session; an existing one keeps its own key)."""

    with tracer.start_as_current_span(
        "brainhands.submit", attributes={"session_id": session_id, "request_id": request_id}
    ):
        carrier = current_carrier()

        def wake(key: str) -> OutboxMessage:
            message = SessionWake(
                session_id=session_id, compat=key, reason="submission", trace=carrier
            )
            return OutboxMessage(topology.brain_queue(key), encode(message))

        return await store.submissions.submit(
            session_id=session_id,
            request_id=request_id,
            input=input,
            compat=compat,
            wake=wake,
        )


async def wait_for_answer(
    store: Store, session_id: str, request_id: str, *, within: float, poll: float = 0.1
) -> SubmissionRecord:
    """Poll the store until the submission is answered, failed or cancelled."""
    deadline = time.monotonic() + within
    while True:
        record = await store.submissions.get(session_id, request_id)
        if record.status in FINAL_SUBMISSION_STATUSES:
            return record
        if time.monotonic() > deadline:
            raise BrainhandsError(
                f"submission {request_id!r} of session {session_id} is still {record.status} "
                f"after {within}s"
            )
        await asyncio.sleep(poll)
