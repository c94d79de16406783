"""The operation ledger: fenced writes of Hands' tool-call records, on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import event, func, select

from brainhands.shared.errors import ConflictError, NotFoundError, StaleLeaseError
from brainhands.shared.store import (
    CommitReceipt,
    OperationClaim,
    OutboxMessage,
    Store,
    schema,
)
from brainhands.shared.store.backends import Sqlite

pytestmark = pytest.mark.integration

INTENT = {
    "session_id": "s1",
    "task_id": "t1",
    "tool": "echo",
    "pool": "default",
    "arguments": {"x": 1},
}


async def test_claim_creates_the_row_then_fence_only_moves_up(store: Store) -> None:
    ledger = store.ledger
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
    ledger = store.ledger
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
    ledger = store.ledger
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
    ledger = store.ledger
    await ledger.claim("op1", 1, intent=INTENT)
    await ledger.mark_started("op1", 1)
    await ledger.schedule_retry("op1", 1, error={"type": "Busy"}, retry_at=123.0)
    row = await ledger.get("op1")
    assert (row.status, row.attempts, row.next_attempt_at) == ("intended", 1, 123.0)
    assert (await ledger.mark_started("op1", 1)).attempts == 2


async def test_large_result_is_stored_once_as_a_blob(store: Store) -> None:
    ledger = store.ledger
    await ledger.claim("op1", 1, intent=INTENT)
    payload = b"x" * 200_000
    await ledger.record_outcome("op1", 1, status="succeeded", blob=payload)
    row = await ledger.get("op1")
    assert row.result is None and row.blob_id is not None
    assert await ledger.read_blob(row.blob_id) == payload


async def test_only_outcomes_are_recorded_as_outcomes(store: Store) -> None:
    ledger = store.ledger
    await ledger.claim("op1", 1, intent=INTENT)
    with pytest.raises(ValueError, match="not an outcome"):
        await ledger.record_outcome("op1", 1, status="started")


async def test_a_refused_claim_leaves_the_row_as_it_was(store: Store) -> None:
    ledger = store.ledger
    await ledger.claim("op1", 4, intent=INTENT)
    before = await ledger.mark_started("op1", 4)

    # Equal too: after Redis restarts empty it may hand the same token to a second holder.
    for refused in (4, 3):
        with pytest.raises(StaleLeaseError) as caught:
            await ledger.claim("op1", refused, intent={**INTENT, "arguments": {"x": 2}})
        assert (caught.value.resource, caught.value.token) == ("operation:op1", refused)
        assert caught.value.current == 4
        assert await ledger.get("op1") == before


async def test_claim_and_start_return_the_row_as_stored(store: Store) -> None:
    ledger = store.ledger
    claimed = await ledger.claim("op1", 1, intent=INTENT)
    assert claimed == OperationClaim(1, await ledger.get("op1"))
    assert claimed.operation.task_id == "t1" and claimed.operation.attempts == 0

    started = await ledger.mark_started("op1", 1)
    assert started == await ledger.get("op1")
    assert started.started_at is not None and started.started_at == started.updated_at

    again = await ledger.claim("op1", 2, intent=INTENT)
    assert again.operation == await ledger.get("op1")
    assert (again.operation.status, again.operation.fence) == ("started", 2)
    assert again.operation.created_at == claimed.operation.created_at
    assert again.operation.updated_at > started.updated_at


async def test_one_of_two_simultaneous_claims_with_one_token_wins(store: Store) -> None:
    ledger = store.ledger
    outcomes = await asyncio.gather(
        *(ledger.claim("op1", 3, intent=INTENT) for _ in range(2)), return_exceptions=True
    )
    refused = [o for o in outcomes if isinstance(o, StaleLeaseError)]
    assert len(refused) == 1 and refused[0].current == 3
    assert (await ledger.get("op1")).fence == 3


async def test_guarded_writes_on_a_missing_operation_say_so(store: Store) -> None:
    ledger = store.ledger
    with pytest.raises(NotFoundError):
        await ledger.mark_started("nope", 1)
    with pytest.raises(NotFoundError):
        await ledger.schedule_retry("nope", 1, error={"type": "Busy"}, retry_at=1.0)
    with pytest.raises(NotFoundError):
        await ledger.record_outcome("nope", 1, status="failed", blob=b"x")
    with pytest.raises(NotFoundError):
        await ledger.get("nope")
    assert (await store.status())["operations"] == 0


async def test_a_stale_retry_or_outcome_writes_nothing(store: Store) -> None:
    ledger = store.ledger
    await ledger.claim("op1", 1, intent=INTENT)
    await ledger.mark_started("op1", 1)
    current = await ledger.claim("op1", 2, intent=INTENT)

    with pytest.raises(StaleLeaseError) as caught:
        await ledger.schedule_retry("op1", 1, error={"type": "Busy"}, retry_at=9.0)
    assert (caught.value.token, caught.value.current) == (1, 2)
    with pytest.raises(StaleLeaseError):
        await ledger.record_outcome(
            "op1", 1, status="succeeded", blob=b"x" * 1000, notify=OutboxMessage("brain.v1", b"r")
        )
    assert await ledger.get("op1") == current.operation
    async with store.backend.engine.connect() as conn:
        blobs = (await conn.execute(select(func.count()).select_from(schema.blob))).scalar_one()
    assert blobs == 0
    assert (await store.status())["outbox_rows"] == 0


async def test_an_outcome_hands_its_outbox_row_to_the_commit_listeners(store: Store) -> None:
    ledger = store.ledger
    receipts: list[CommitReceipt] = []
    store.add_commit_listener(receipts.append)
    store.handoff.begin(30.0)
    await ledger.claim("op1", 1, intent=INTENT)
    await ledger.record_outcome("op1", 1, status="failed", error={"type": "Boom"})
    assert receipts == []  # nothing to publish

    await ledger.claim("op2", 1, intent=INTENT)
    message = OutboxMessage("brain.v1", b"result", {"h": "1"})
    await ledger.record_outcome("op2", 1, status="succeeded", notify=message, session_id="s1")
    [receipt] = receipts
    [row] = receipt.outbox
    assert (receipt.session_id, row.routing_key, row.body, row.headers) == (
        "s1",
        "brain.v1",
        b"result",
        {"h": "1"},
    )
    o = schema.outbox
    async with store.backend.engine.connect() as conn:
        stored = (await conn.execute(select(o).where(o.c.id == row.id))).one()
    assert stored.session_id == "s1" and stored.sent_at is None
    assert stored.publish_after == pytest.approx(stored.created_at + 30.0)


async def test_an_outcome_and_its_result_event_are_one_statement_on_postgresql(
    store: Store,
) -> None:
    """PostgreSQL inserts the event from the guarded update's row; SQLite runs the two
    statements in one transaction. Either way a stale outcome writes neither."""
    ledger = store.ledger
    await ledger.claim("op1", 1, intent=INTENT)
    await ledger.claim("op2", 1, intent=INTENT)
    await ledger.claim("op2", 2, intent=INTENT)
    sent: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not statement.startswith("BEGIN"):  # SQLite's BEGIN IMMEDIATE
            sent.append(statement)

    message = OutboxMessage("brain.v1", b"result", {"h": "1"})
    event.listen(store.backend.writes_on, "before_cursor_execute", note)
    try:
        await ledger.record_outcome("op1", 1, status="succeeded", notify=message, session_id="s1")
    finally:
        event.remove(store.backend.writes_on, "before_cursor_execute", note)
    expected = {"Postgres": 1, "Sqlite": 2}[type(store.backend).__name__]
    assert len(sent) == expected, sent

    with pytest.raises(StaleLeaseError):
        await ledger.record_outcome("op2", 1, status="succeeded", notify=message, session_id="s1")
    o = schema.outbox
    async with store.backend.engine.connect() as conn:
        rows = (await conn.execute(select(o.c.session_id, o.c.body, o.c.headers))).all()
    assert [tuple(r) for r in rows] == [("s1", b"result", {"h": "1"})]
    assert (await ledger.get("op2")).status == "intended"


async def test_a_driver_error_leaves_as_a_store_error(store: Store) -> None:
    ledger = store.ledger
    with pytest.raises(ConflictError):
        await ledger.claim("op1", 1, intent={**INTENT, "tool": None})
    # The failed transaction left its connection usable.
    assert (await ledger.claim("op1", 1, intent=INTENT)).fence == 1


async def test_the_ledger_works_on_an_in_memory_sqlite_store() -> None:
    """No second engine can share an in-memory database: the writes run on the async one."""
    store = await Store.open("sqlite+aiosqlite:///:memory:", upgrade=True)
    try:
        assert isinstance(store.backend, Sqlite) and store.backend.writer is None
        ledger = store.ledger
        await ledger.claim("op1", 1, intent=INTENT)
        with pytest.raises(StaleLeaseError):
            await ledger.claim("op1", 1, intent=INTENT)
        assert (await ledger.mark_started("op1", 1)).attempts == 1
        await ledger.record_outcome("op1", 1, status="succeeded", result=[1])
        assert (await ledger.get("op1")).result == [1]
    finally:
        await store.close()
