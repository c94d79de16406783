"""The operation ledger: fenced writes of Hands' tool-call records, on both backends."""

from __future__ import annotations

import pytest

from shared.errors import StaleLeaseError
from shared.store import OperationLedger, OutboxMessage, Store

pytestmark = pytest.mark.integration

INTENT = {
    "session_id": "s1",
    "task_id": "t1",
    "tool": "echo",
    "pool": "default",
    "arguments": {"x": 1},
}


async def test_claim_creates_the_row_then_fence_only_moves_up(store: Store) -> None:
    ledger = OperationLedger(store)
    first = await ledger.claim("op1", 4, intent=INTENT)
    assert first.operation.status == "intended"
    assert first.operation.arguments == {"x": 1}

    for refused in (4, 2):
        with pytest.raises(StaleLeaseError) as caught:
            await ledger.claim("op1", refused, intent=INTENT)
        assert caught.value.current == 4

    higher = await ledger.claim("op1", 6, intent={**INTENT, "arguments": {"x": "changed"}})
    assert higher.operation.arguments == {"x": 1}  # frozen at first claim
    assert higher.operation.fence == 6


async def test_full_lifecycle_with_result_event_in_the_same_transaction(store: Store) -> None:
    ledger = OperationLedger(store)
    await ledger.claim("op1", 1, intent=INTENT)
    started = await ledger.mark_started("op1", 1)
    assert (started.status, started.attempts) == ("started", 1)

    await ledger.record_outcome(
        "op1",
        1,
        status="succeeded",
        result={"ok": True},
        notify=OutboxMessage("brain.v1", b"result"),
        session_id="s1",
    )
    done = await ledger.get("op1")
    assert (done.status, done.result, done.attempts) == ("succeeded", {"ok": True}, 1)
    assert done.finished_at is not None
    assert (await store.status())["outbox_unsent"] == 1


async def test_writes_with_a_superseded_token_change_nothing(store: Store) -> None:
    ledger = OperationLedger(store)
    await ledger.claim("op1", 1, intent=INTENT)
    await ledger.mark_started("op1", 1)
    await ledger.claim("op1", 2, intent=INTENT)

    with pytest.raises(StaleLeaseError) as caught:
        await ledger.record_outcome(
            "op1",
            1,
            status="succeeded",
            result={"late": True},
            notify=OutboxMessage("brain.v1", b"result"),
        )
    assert (caught.value.token, caught.value.current) == (1, 2)
    with pytest.raises(StaleLeaseError):
        await ledger.mark_started("op1", 1)
    row = await ledger.get("op1")
    assert (row.status, row.result, row.attempts) == ("started", None, 1)
    assert (await store.status())["outbox_rows"] == 0


async def test_retry_schedule_keeps_the_attempt_count(store: Store) -> None:
    ledger = OperationLedger(store)
    await ledger.claim("op1", 1, intent=INTENT)
    await ledger.mark_started("op1", 1)
    await ledger.schedule_retry("op1", 1, error={"type": "Busy"}, retry_at=123.0)
    row = await ledger.get("op1")
    assert (row.status, row.attempts, row.next_attempt_at) == ("intended", 1, 123.0)
    assert (await ledger.mark_started("op1", 1)).attempts == 2


async def test_large_result_is_stored_once_as_a_blob(store: Store) -> None:
    ledger = OperationLedger(store)
    await ledger.claim("op1", 1, intent=INTENT)
    payload = b"x" * 200_000
    await ledger.record_outcome("op1", 1, status="succeeded", blob=payload)
    row = await ledger.get("op1")
    assert row.result is None and row.blob_id is not None
    assert await ledger.read_blob(row.blob_id) == payload


async def test_only_outcomes_are_recorded_as_outcomes(store: Store) -> None:
    ledger = OperationLedger(store)
    await ledger.claim("op1", 1, intent=INTENT)
    with pytest.raises(ValueError, match="not an outcome"):
        await ledger.record_outcome("op1", 1, status="started")
