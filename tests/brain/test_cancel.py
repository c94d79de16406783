"""Cancellation is committed first, then carried out: children wind down, Hands are told."""

from __future__ import annotations

import pytest

from brainhands.shared.store import FINAL_OPERATION_STATUSES
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_email_hands

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_cancelling_a_submission_stops_children_and_the_running_tool(
    brains: BrainHarness,
) -> None:
    brains.start_brain()
    hands = spawn_email_hands(
        env=brains.settings(),
        log=brains.tmp_path / "hands.log",
    )
    brains.processes.append(hands)
    await brains.submit("family", {})

    async def tool_running() -> bool:
        state = await brains.store.load("s1")
        ops = [t.operation_id for t in state.open_tasks if t.operation_id]
        found = await brains.store.queries.operations_by_ids(ops)
        # Claimed and not yet ended: a safe call goes out with no ``started`` mark.
        return any(op.status not in FINAL_OPERATION_STATUSES for op in found.values())

    await eventually(tool_running, within=30, what="the tool call to start")
    assert await cancel(brains) == "requested"

    record = await brains.answer(within=30)

    assert record.status == "cancelled"
    state = await brains.store.load("s1")
    assert state.open_tasks == []  # every child settled before the parent did
    ledger_ops = (await brains.store.status())["operations"]
    assert ledger_ops == 1

    async def tool_heard_it() -> bool:
        from sqlalchemy import select

        from brainhands.shared.store import schema

        async with brains.store.backend.engine.connect() as conn:
            op_id = (await conn.execute(select(schema.operation.c.operation_id))).scalar_one()
        op = await brains.store.ledger.get(op_id)
        return op.status == "succeeded" and op.result == {"stopped_by_cancel": True}

    await eventually(tool_heard_it, within=15, what="the tool to see the cancel notice")


async def cancel(brains: BrainHarness) -> str:
    async with brains.client() as client:
        return await client.cancel("s1", "r1")


@pytest.mark.chaos
async def test_a_job_still_queued_for_a_cancelled_call_is_never_run(
    brains: BrainHarness,
) -> None:
    # Hands served the tool once (its declaration is in the store); none runs now, so the
    # job waits in its queue.
    await brains.declare_tools()
    brains.start_brain()
    await brains.submit("long_call", {})

    async def job_sent() -> bool:
        state = await brains.store.load("s1")
        return (
            any(t.operation_id for t in state.open_tasks)
            and (await brains.store.status())["outbox_unsent"] == 0
        )

    await eventually(job_sent, within=30, what="the tool job to be published")
    [task] = [t for t in (await brains.store.load("s1")).open_tasks if t.operation_id]
    assert await cancel(brains) == "requested"
    record = await brains.answer(within=30)
    assert record.status == "cancelled"

    hands = spawn_email_hands(env=brains.settings(), log=brains.tmp_path / "hands.log")
    brains.processes.append(hands)

    async def recorded() -> bool:
        try:
            op = await brains.store.ledger.get(task.operation_id or "")
        except Exception:
            return False
        return op.status == "cancelled"

    await eventually(recorded, within=30, what="Hands to record the call cancelled")
    op = await brains.store.ledger.get(task.operation_id or "")
    assert op.attempts == 0  # the tool never ran
    assert op.error["type"] == "Cancelled"
