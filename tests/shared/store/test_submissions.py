"""Submitting: once per request id, with its wake-up, for the session's own key and tenant."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import Store, schema
from brainhands.shared.store.draft import OutboxMessage
from brainhands.shared.store.submissions import get_submission, submit
from tests.helpers.stores import StoreTarget, holding_a_transaction, until_waiting_on_a_lock


def wake(key: str) -> OutboxMessage:
    return OutboxMessage(f"brain.{key}", key.encode())


async def outbox_rows(store: Store) -> list[tuple[str, bytes]]:
    o = schema.outbox
    async with store.backend.snapshot() as conn:
        rows = await conn.execute(select(o.c.routing_key, o.c.body).order_by(o.c.id))
        return [(r.routing_key, bytes(r.body)) for r in rows]


async def test_a_request_id_is_accepted_once_and_wakes_the_sessions_own_key(store: Store) -> None:
    first = await submit(
        store, session_id="s1", request_id="r1", input={"n": 1}, compat="v1", wake=wake
    )
    assert first.created and first.submission.status == "queued"
    assert first.submission.input == {"n": 1}
    assert await outbox_rows(store) == [("brain.v1", b"v1")]

    again = await submit(
        store, session_id="s1", request_id="r1", input={"n": 2}, compat="v2", wake=wake
    )
    assert not again.created
    assert again.submission == first.submission  # the original, input and all
    assert await outbox_rows(store) == [("brain.v1", b"v1")]  # nobody woken twice

    # A new request id in the existing session wakes the key the session was created with.
    other = await submit(
        store, session_id="s1", request_id="r2", input={"n": 3}, compat="v2", wake=wake
    )
    assert other.created and other.submission.id != first.submission.id
    assert await outbox_rows(store) == [("brain.v1", b"v1"), ("brain.v1", b"v1")]
    assert await get_submission(store, "s1", "r2") == other.submission


async def test_another_tenants_session_does_not_exist_and_gets_nothing(store: Store) -> None:
    await submit(
        store, session_id="s1", request_id="r1", input=1, compat="v1", wake=wake, tenant="acme"
    )
    await submit(store, session_id="s2", request_id="r1", input=1, compat="v1", wake=wake)
    for session_id, tenant in (("s1", "globex"), ("s2", "acme")):  # another's, and no one's
        with pytest.raises(NotFoundError, match=f"session {session_id} does not exist"):
            await submit(
                store, session_id=session_id, request_id="r2", input=2, compat="v1", wake=wake,
                tenant=tenant,
            )  # fmt: skip
    sub = schema.submission
    async with store.backend.snapshot() as conn:
        count = await conn.execute(select(func.count()).select_from(sub))
        assert count.scalar_one() == 2
    assert len(await outbox_rows(store)) == 2
    with pytest.raises(NotFoundError, match="no submission 'r2'"):
        await get_submission(store, "s1", "r2")


async def test_submissions_racing_to_create_one_session_are_each_accepted_once(
    store: Store,
) -> None:
    # Twenty first contacts with one session at once: one session, each request once.
    receipts = await asyncio.gather(
        *(
            submit(store, session_id="s1", request_id=f"r{n}", input=n, compat="v1", wake=wake)
            for n in range(20)
        )
    )
    assert all(r.created for r in receipts)
    assert sorted(r.submission.input for r in receipts) == list(range(20))
    assert await outbox_rows(store) == [("brain.v1", b"v1")] * 20
    s = schema.session
    async with store.backend.snapshot() as conn:
        assert (await conn.execute(select(func.count()).select_from(s))).scalar_one() == 1


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_a_submission_that_waited_for_the_sessions_creator_takes_the_longer_way(
    store: Store, store_target: StoreTarget
) -> None:
    # Another transaction has inserted the session and not committed yet: the one-statement
    # submission waits for it on the conflict, then does not see its row in its snapshot.
    async with holding_a_transaction(store_target) as holder:
        await holder.execute(
            "INSERT INTO session (id, uid, compat, version, fence, status, entry_count, "
            "created_at, updated_at) VALUES ('s1', 'u1', 'v1', 0, 0, 'active', 0, 1, 1)"
        )
        pending = asyncio.create_task(
            submit(store, session_id="s1", request_id="r1", input=1, compat="v1", wake=wake)
        )
        await until_waiting_on_a_lock(holder, "the submission to wait on it")
        assert not pending.done()
    receipt = await pending
    assert receipt.created and receipt.submission.input == 1
    assert await outbox_rows(store) == [("brain.v1", b"v1")]
