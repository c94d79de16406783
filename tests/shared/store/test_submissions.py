"""Submitting: once per request id, with its wake-up, for the session's own key; a tenant's
sessions apart from every other tenant's."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select

from brainhands.shared.errors import InvalidRequest
from brainhands.shared.store import Store, schema
from brainhands.shared.store.draft import OutboxMessage
from brainhands.shared.tenancy import DEFAULT_TENANT, check_tenant, session_key, split_key
from tests.helpers.stores import StoreTarget, holding_a_transaction, until_waiting_on_a_lock


def wake(key: str) -> OutboxMessage:
    return OutboxMessage(f"brain.{key}", key.encode())


async def outbox_rows(store: Store) -> list[tuple[str, bytes]]:
    o = schema.outbox
    async with store.backend.snapshot() as conn:
        rows = await conn.execute(select(o.c.routing_key, o.c.body).order_by(o.c.id))
        return [(r.routing_key, bytes(r.body)) for r in rows]


async def test_a_request_id_is_accepted_once_and_wakes_the_sessions_own_key(store: Store) -> None:
    first = await store.submissions.submit(
        session_id="s1", request_id="r1", input={"n": 1}, compat="v1", wake=wake
    )
    assert first.created and first.submission.status == "queued"
    assert first.submission.input == {"n": 1}
    assert await outbox_rows(store) == [("brain.v1", b"v1")]

    again = await store.submissions.submit(
        session_id="s1", request_id="r1", input={"n": 2}, compat="v2", wake=wake
    )
    assert not again.created
    assert again.submission == first.submission  # the original, input and all
    assert await outbox_rows(store) == [("brain.v1", b"v1")]  # nobody woken twice

    # A new request id in the existing session wakes the key the session was created with.
    other = await store.submissions.submit(
        session_id="s1", request_id="r2", input={"n": 3}, compat="v2", wake=wake
    )
    assert other.created and other.submission.id != first.submission.id
    assert await outbox_rows(store) == [("brain.v1", b"v1"), ("brain.v1", b"v1")]
    assert await store.submissions.get("s1", "r2") == other.submission


async def test_the_same_id_in_two_tenants_is_two_sessions_each_its_tenants(
    store: Store,
) -> None:
    keys = [session_key(t, "order-123") for t in ("acme", "globex", DEFAULT_TENANT)]
    assert keys == ["acme/order-123", "globex/order-123", "order-123"]
    receipts = [
        await store.submissions.submit(
            session_id=k, request_id="r1", input=n, compat="v1", wake=wake, principal=f"key:{n}"
        )
        for n, k in enumerate(keys)
    ]
    # The first contact of each tenant created its own session: none was told "taken".
    assert all(r.created for r in receipts)
    s, sub = schema.session, schema.submission
    async with store.backend.snapshot() as conn:
        owners = dict((await conn.execute(select(s.c.id, s.c.tenant))).all())
        principals = dict((await conn.execute(select(sub.c.session_id, sub.c.principal))).all())
    assert owners == {
        "acme/order-123": "acme", "globex/order-123": "globex", "order-123": DEFAULT_TENANT,
    }  # fmt: skip
    assert principals == {k: f"key:{n}" for n, k in enumerate(keys)}
    assert (await store.submissions.get("globex/order-123", "r1")).input == 1
    assert (await store.load("acme/order-123")).session.tenant == "acme"


def test_a_tenants_session_id_cannot_name_another_tenants_key() -> None:
    with pytest.raises(InvalidRequest, match="has no '/'"):
        session_key("globex", "acme/order-123")
    with pytest.raises(InvalidRequest, match="tenant 'a/b'"):
        check_tenant("a/b")
    assert split_key("acme/order-123") == ("acme", "order-123")
    assert split_key("order-123") == (DEFAULT_TENANT, "order-123")


async def test_submissions_racing_to_create_one_session_are_each_accepted_once(
    store: Store,
) -> None:
    # Twenty first contacts with one session at once: one session, each request once.
    receipts = await asyncio.gather(
        *(
            store.submissions.submit(
                session_id="s1", request_id=f"r{n}", input=n, compat="v1", wake=wake
            )
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
            store.submissions.submit(
                session_id="s1", request_id="r1", input=1, compat="v1", wake=wake
            )
        )
        await until_waiting_on_a_lock(holder, "the submission to wait on it")
        assert not pending.done()
    receipt = await pending
    assert receipt.created and receipt.submission.input == 1
    assert await outbox_rows(store) == [("brain.v1", b"v1")]
