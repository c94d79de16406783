"""The inbox: a request is one row however often it is sent, and waits to be applied."""

from __future__ import annotations

import time

import pytest

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import Draft, OutboxMessage, Store

pytestmark = pytest.mark.integration


def wake(compat: str) -> OutboxMessage:
    return OutboxMessage(f"brain.{compat}", b"{}")


async def test_a_request_is_kept_once_until_a_commit_applies_it(store: Store) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)

    first = await store.inbox.send_request(session_id="s1", kind="cancel", key="r1", wake=wake)
    again = await store.inbox.send_request(session_id="s1", kind="cancel", key="r1", wake=wake)

    assert (first.created, again.created) == (True, False)
    assert again.request.id == first.request.id
    assert (await store.status())["outbox_rows"] == 1  # one wake-up, for the one request
    state = await store.load("s1")
    assert [(r.kind, r.key) for r in state.inbox] == [("cancel", "r1")]
    found = await store.queries.sessions_needing_attention(now=time.time() + 10, grace=1.0)
    assert [ref.session_id for ref in found] == ["s1"]  # a lost wake-up is found again

    draft = Draft("s1", version=state.session.version, fence=1)
    draft.mark_applied(first.request.id)
    await store.commit(draft)

    assert (await store.load("s1")).inbox == []
    [request] = await store.inbox.of_session("s1")
    assert request.applied_at is not None
    assert await store.queries.sessions_needing_attention(now=time.time() + 10) == []


async def test_a_request_to_an_unknown_session_is_refused(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.inbox.send_request(session_id="nobody", kind="cancel", key="r1", wake=wake)
