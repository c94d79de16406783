"""Submitting input to a session and waiting for its answer (what ``brainhands submit`` runs)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from shared.errors import BrainhandsError
from shared.messages import SessionWake, encode
from shared.store import OutboxMessage, Store, SubmissionRecord
from shared.store.submissions import SubmitReceipt, get_submission, submit
from shared.topology import Topology

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
    """Accept ``input`` once per ``request_id`` and wake the Brains of ``compat``."""
    wake = SessionWake(session_id=session_id, compat=compat, reason="submission")
    return await submit(
        store,
        session_id=session_id,
        request_id=request_id,
        input=input,
        compat=compat,
        wake=OutboxMessage(topology.brain_queue(compat), encode(wake)),
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
