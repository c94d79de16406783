"""Group commit: drafts of several sessions in one transaction, each guard on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import event, text

from brainhands.shared.errors import ConflictError, StaleLeaseError, StoreError
from brainhands.shared.store import (
    CommitReceipt,
    Draft,
    OperationLedger,
    OutboxMessage,
    Store,
)
from brainhands.shared.store.commit import one_round_trip

pytestmark = pytest.mark.integration


def batches(what: str = "drafts") -> tuple[float, float]:
    """(transactions, writes) the process's group commits of ``what`` have flushed so far."""
    labels = {"what": what}
    count = REGISTRY.get_sample_value("brainhands_group_commit_writes_count", labels) or 0.0
    total = REGISTRY.get_sample_value("brainhands_group_commit_writes_sum", labels) or 0.0
    return count, total


async def sessions(store: Store, n: int) -> list[str]:
    ids = [f"s{i}" for i in range(n)]
    for session_id in ids:
        await store.create_session(session_id, compat="v1")
        await store.claim_session_fence(session_id, 1)
    return ids


def note(session_id: str, text: str) -> Draft:
    draft = Draft(session_id, version=0, fence=1)
    draft.append_entry("user", {"text": text})
    draft.add_outbox("q", text.encode())
    return draft


async def test_drafts_ready_together_commit_in_one_transaction_and_a_refused_guard_drops_only_its_own(  # noqa: E501
    store: Store,
) -> None:
    ids = await sessions(store, 4)
    # Another holder took s2 since its draft was made.
    assert await store.claim_session_fence("s2", 2) == 2
    before = batches()

    outcomes = await asyncio.gather(
        *(store.commit(note(s, f"hello {s}")) for s in ids), return_exceptions=True
    )

    after = batches()
    assert (after[0] - before[0], after[1] - before[1]) == (1, 4)  # one transaction of four
    refused = outcomes[2]
    assert isinstance(refused, StaleLeaseError) and refused.current == 2
    for session_id, outcome in zip(ids, outcomes, strict=True):
        state = await store.load(session_id)
        if session_id == "s2":
            assert state.session.version == 0 and state.entries == []
        else:
            assert not isinstance(outcome, BaseException)
            assert outcome.version == 1 and outcome.entry_seqs == [1]
            assert [e.body for e in state.entries] == [{"text": f"hello {session_id}"}]
    assert (await store.status())["outbox_rows"] == 3


async def test_drafts_of_one_shape_in_a_batch_share_one_round_trip(store: Store) -> None:
    ids = await sessions(store, 5)
    assert await store.claim_session_fence("s3", 2) == 2  # its draft is refused, alone
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(store.backend.writes_on, "before_cursor_execute", count)
    try:
        outcomes = await asyncio.gather(
            *(store.commit(note(s, s)) for s in ids), return_exceptions=True
        )
    finally:
        event.remove(store.backend.writes_on, "before_cursor_execute", count)

    assert isinstance(outcomes[3], StaleLeaseError)
    receipts = [o for o in outcomes if isinstance(o, CommitReceipt)]
    assert [r.session_id for r in receipts] == ["s0", "s1", "s2", "s4"]
    assert all(r.version == 1 and len(r.outbox) == 1 for r in receipts)
    async with store.backend.snapshot() as conn:
        stored = dict((await conn.execute(text("SELECT id, session_id FROM outbox"))).all())
    # Each receipt names its own draft's outbox row (the relay marks it sent by that id).
    assert {r.outbox[0].id: r.session_id for r in receipts} == stored
    for receipt in receipts:
        [entry] = (await store.load(receipt.session_id)).entries
        assert entry.body == {"text": receipt.session_id}
    if store.backend.chains_writes:  # the four drafts' statements, pipelined: one round trip
        writes = [s for s in statements if s.lstrip().startswith("WITH")]
        assert len(writes) == 1


async def test_a_draft_failing_late_in_a_batch_fails_alone_and_the_others_commit(
    store: Store,
) -> None:
    ids = await sessions(store, 3)
    drafts = [note(s, s) for s in ids]
    drafts[1].update_task("no-such-task", status="running")  # fails after its inserts
    before = batches()

    outcomes = await asyncio.gather(*map(store.commit, drafts), return_exceptions=True)

    after = batches()
    # The batch rolled back, then each draft went alone.
    assert (after[0] - before[0], after[1] - before[1]) == (4, 6)
    assert isinstance(outcomes[1], ConflictError)
    versions = [(await store.load(s)).session.version for s in ids]
    assert versions == [1, 0, 1]
    assert (await store.status())["outbox_rows"] == 2


async def test_a_batch_sent_without_begin_fails_whole_and_its_drafts_go_alone(
    store: Store,
) -> None:
    ids = await sessions(store, 3)
    tasks = {}
    for session_id in ids:
        first = Draft(session_id, version=0, fence=1)
        tasks[session_id] = first.add_task(kind="k", kind_version=1, input={}, status="waiting")
        await store.commit(first)
    tasks["s1"] = "no-such-task"  # fails in the middle of the pipelined statement
    drafts = []
    for session_id in ids:
        draft = Draft(session_id, version=1, fence=1)
        draft.append_entry("user", {"text": session_id})
        draft.update_task(tasks[session_id], status="running")
        draft.add_outbox("q", session_id.encode())
        drafts.append(draft)
    chained = store.backend.chains_writes
    # One statement for the three, so no BEGIN and COMMIT around it on PostgreSQL.
    assert one_round_trip(drafts, chained=chained, notify=store.backend.notifies) == chained
    before = batches()

    outcomes = await asyncio.gather(*map(store.commit, drafts), return_exceptions=True)

    after = batches()
    # s0's write, ahead of s1's in the pipeline, was undone with it: going alone, it commits
    # (a write left behind would have had its guard refuse it).
    assert (after[0] - before[0], after[1] - before[1]) == (4, 6)
    assert isinstance(outcomes[1], ConflictError)
    assert [o.version for o in outcomes if isinstance(o, CommitReceipt)] == [2, 2]
    for session_id in ids:
        state = await store.load(session_id)
        texts = [e.body["text"] for e in state.entries]
        assert texts == ([] if session_id == "s1" else [session_id])
    assert (await store.status())["outbox_rows"] == 2


async def test_a_lone_draft_is_committed_alone_at_once(store: Store) -> None:
    [session_id] = await sessions(store, 1)
    before = batches()

    receipt = await asyncio.wait_for(store.commit(note(session_id, "alone")), timeout=5)

    after = batches()
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    assert receipt.version == 1


async def test_a_caller_that_stops_waiting_does_not_undo_its_draft_or_the_others(
    store: Store,
) -> None:
    ids = await sessions(store, 3)
    commits = [asyncio.create_task(store.commit(note(s, s))) for s in ids]
    await asyncio.sleep(0)  # all three are waiting for the flush
    commits[0].cancel()

    outcomes = await asyncio.gather(*commits, return_exceptions=True)

    assert isinstance(outcomes[0], asyncio.CancelledError)
    # The cancelled caller's draft was in the flush already: committed all the same, as a
    # lone commit cancelled after it was sent may be. Recovery reads the store, not the
    # caller's belief.
    assert [(await store.load(s)).session.version for s in ids] == [1, 1, 1]


INTENT = {"session_id": "s1", "task_id": "t1", "tool": "echo", "pool": "p", "arguments": {}}


async def claimed(ledger: OperationLedger, n: int) -> list[str]:
    ids = [f"op{i}" for i in range(n)]
    for operation_id in ids:
        await ledger.claim(operation_id, 1, intent=INTENT)
    return ids


def outcome(ledger: OperationLedger, operation_id: str, result: object) -> Awaitable[None]:
    return ledger.record_outcome(
        operation_id,
        1,
        status="succeeded",
        result=result,
        notify=OutboxMessage("results.v1", operation_id.encode()),
        session_id="s1",
    )


async def test_outcomes_ready_together_commit_in_one_transaction_and_a_stale_is_refused_alone(
    store: Store,
) -> None:
    ledger = store.ledger
    ids = await claimed(ledger, 4)
    await ledger.claim("op2", 2, intent=INTENT)  # another worker took op2 since
    receipts: list[CommitReceipt] = []
    store.add_commit_listener(receipts.append)
    before = batches("outcomes")

    outcomes = await asyncio.gather(
        *(outcome(ledger, op, {"n": n}) for n, op in enumerate(ids)), return_exceptions=True
    )

    after = batches("outcomes")
    assert (after[0] - before[0], after[1] - before[1]) == (1, 4)  # one transaction of four
    refused = outcomes[2]
    assert isinstance(refused, StaleLeaseError) and refused.current == 2
    for n, operation_id in enumerate(ids):
        op = await ledger.get(operation_id)
        if operation_id == "op2":
            assert (op.status, op.result) == ("intended", None)
        else:
            assert outcomes[n] is None
            assert (op.status, op.result) == ("succeeded", {"n": n})
    # Only the recorded ones' result events exist, each handed to the listeners once.
    assert sorted(row.body for r in receipts for row in r.outbox) == [b"op0", b"op1", b"op3"]
    assert (await store.status())["outbox_rows"] == 3


async def test_an_outcome_failing_in_a_batch_fails_alone_and_the_others_are_recorded(
    store: Store,
) -> None:
    ledger = store.ledger
    ids = await claimed(ledger, 3)
    before = batches("outcomes")

    results: list[object] = [1, {"not JSON": {1, 2}}, 3]  # a set cannot be stored
    outcomes = await asyncio.gather(
        *(outcome(ledger, op, r) for op, r in zip(ids, results, strict=True)),
        return_exceptions=True,
    )

    after = batches("outcomes")
    # The batch rolled back, then each outcome went alone.
    assert (after[0] - before[0], after[1] - before[1]) == (4, 6)
    assert isinstance(outcomes[1], StoreError)
    assert [(await ledger.get(op)).status for op in ids] == ["succeeded", "intended", "succeeded"]
    assert (await store.status())["outbox_rows"] == 2


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_outcomes_sent_without_begin_fail_whole_and_go_alone(store: Store) -> None:
    ledger = store.ledger
    ids = await claimed(ledger, 3)
    # Each outcome and its event are one statement, pipelined for the three: no BEGIN and
    # COMMIT around them. The middle one's event fails on the server (a routing key longer
    # than its column), in the middle of the pipeline.
    keys = ["results.v1", "r" * 300, "results.v1"]
    before = batches("outcomes")

    outcomes = await asyncio.gather(
        *(
            ledger.record_outcome(
                op,
                1,
                status="succeeded",
                result={"op": op},
                notify=OutboxMessage(key, op.encode()),
                session_id="s1",
            )
            for op, key in zip(ids, keys, strict=True)
        ),
        return_exceptions=True,
    )

    after = batches("outcomes")
    # op0's write, ahead of op1's in the pipeline, was undone with it: going alone, it is
    # recorded (a write left behind would have had its guard refuse it).
    assert (after[0] - before[0], after[1] - before[1]) == (4, 6)
    assert isinstance(outcomes[1], StoreError)
    assert outcomes[0] is None and outcomes[2] is None
    assert [(await ledger.get(op)).status for op in ids] == ["succeeded", "intended", "succeeded"]
    assert (await store.status())["outbox_rows"] == 2
