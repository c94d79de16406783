"""Submitting input to a session and waiting for its answer (what ``brainhands submit`` runs)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from brainhands.shared.errors import BrainhandsError
from brainhands.shared.lease import LeaseManager
from brainhands.shared.messages import SessionWake, encode
from brainhands.shared.store import Draft, OutboxMessage, Store, SubmissionRecord
from brainhands.shared.store.submissions import SubmitReceipt, get_submission, submit
from brainhands.shared.topology import Topology
from brainhands.shared.tracing import current_carrier, tracer

FINAL_SUBMISSION = ("answered", "failed", "cancelled")


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

        return await submit(
            store,
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
        record = await get_submission(store, session_id, request_id)
        if record.status in FINAL_SUBMISSION:
            return record
        if time.monotonic() > deadline:
            raise BrainhandsError(
                f"submission {request_id!r} of session {session_id} is still {record.status} "
                f"after {within}s"
            )
        await asyncio.sleep(poll)


async def request_cancel(
    store: Store, leases: LeaseManager, topology: Topology, *, session_id: str, request_id: str
) -> str:
    """Cancel a submission durably: commit the intent, then wake the session's Brains.

    Returns what happened: ``cancelled`` (it had not started), ``requested`` (its task will
    wind down), or the submission's final status when it had already ended.
    """
    lease = None
    for _ in range(50):
        lease = await leases.acquire_fenced(
            f"session:{session_id}", lambda t: store.claim_session_fence(session_id, t)
        )
        if lease is not None:
            break
        await asyncio.sleep(0.2)
    if lease is None:
        raise BrainhandsError(f"session {session_id} stayed busy; try again")
    try:
        state = await store.load(session_id)
        record = await get_submission(store, session_id, request_id)
        if record.status in FINAL_SUBMISSION:
            return record.status
        draft = Draft(session_id, version=state.session.version, fence=lease.token)
        root = next((t for t in state.open_tasks if t.submission_id == record.id), None)
        if root is None:
            draft.update_submission(record.id, status="cancelled", error="cancelled")
            outcome = "cancelled"
        else:
            draft.update_task(root.id, cancel_requested=True)
            wake = SessionWake(session_id=session_id, compat=state.session.compat, reason="cancel")
            draft.add_outbox(topology.brain_queue(state.session.compat), encode(wake))
            outcome = "requested"
        await store.commit(draft)
        return outcome
    finally:
        await leases.release(lease)
