"""A Brain's claim reads a session's entries from its latest checkpoint on, and the context
it rebuilds from them is the one rebuilt from every entry, byte for byte; whoever shows the
session (its load, its detail) still reads every entry."""

from __future__ import annotations

import json
from typing import Any

import pytest

from brainhands.brain.context import CHECKPOINT, build_messages, fold
from brainhands.shared.store import Draft, EntryRecord, Store

pytestmark = pytest.mark.integration

SYSTEM = "You run errands."


def turn(n: int) -> list[tuple[str, Any]]:
    """One model turn's entries: a user's message, a call, its result, the answer."""
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    return [
        ("user", {"text": f"errand {n}: " + "x" * n}),
        (
            "model",
            {"raw": {}, "model": "m", "message": {"role": "assistant", "tool_calls": [call]}},
        ),
        ("tool_result", {"call_id": f"call_{n}", "name": "look", "status": "ok", "n": n}),
        ("model", {"raw": {}, "model": "m", "message": {"role": "assistant", "content": "done"}}),
    ]


async def append(store: Store, session_id: str, entries: list[tuple[str, Any]]) -> None:
    state = await store.load(session_id)
    draft = Draft(session_id, version=state.session.version, fence=state.session.fence)
    for kind, body in entries:
        draft.append_entry(kind, body)
    await store.commit(draft)


async def checkpoint(store: Store, session_id: str, summary: str) -> None:
    """A checkpoint as a compaction leaves it: a summary, then the latest messages."""
    messages = fold((await store.load(session_id)).entries)
    body = {"messages": [{"role": "user", "content": summary}, *messages[-2:]], "covers": 0}
    await append(store, session_id, [(CHECKPOINT, body)])


async def claimed_entries(store: Store, session_id: str) -> list[EntryRecord]:
    fence = (await store.load(session_id)).session.fence
    return (await store.claim_session(session_id, fence + 1)).state.entries


def rebuilt(entries: list[EntryRecord]) -> str:
    return json.dumps(build_messages(SYSTEM, entries))


async def test_without_a_checkpoint_a_claim_reads_every_entry(store: Store) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    for n in range(3):
        await append(store, "s1", turn(n))

    every = (await store.load("s1")).entries
    claimed = await claimed_entries(store, "s1")

    assert [e.seq for e in claimed] == [e.seq for e in every] == list(range(1, 13))
    assert rebuilt(claimed) == rebuilt(every)


async def test_a_claim_reads_from_the_latest_checkpoint_and_rebuilds_the_same_context(
    store: Store,
) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    await store.create_session("other", compat="v1")  # its checkpoint is no bound of s1's
    await store.claim_session_fence("other", 1)
    for n in range(3):
        await append(store, "s1", turn(n))
    await checkpoint(store, "s1", "first summary")  # seq 13
    for n in range(3, 5):
        await append(store, "s1", turn(n))
    await checkpoint(store, "s1", "second summary")  # seq 22
    await append(store, "s1", turn(5))
    await append(store, "other", [*turn(0), *turn(1), *turn(2), *turn(3), *turn(4), *turn(5)])
    await append(store, "other", [(CHECKPOINT, {"messages": [], "covers": 0})])  # seq 25

    every = (await store.load("s1")).entries
    claimed = await claimed_entries(store, "s1")

    assert [e.seq for e in claimed] == list(range(22, 27))
    assert claimed[0].kind == CHECKPOINT
    assert rebuilt(claimed) == rebuilt(every)
    assert json.loads(rebuilt(claimed))[1] == {"role": "user", "content": "second summary"}
    # The history stays whole where it is shown.
    assert [e.seq for e in every] == list(range(1, 27))
    assert [e.seq for e in (await store.detail("s1")).state.entries] == list(range(1, 27))


async def test_a_state_kept_from_a_pass_that_made_a_checkpoint_is_cut_at_it(
    store: Store,
) -> None:
    """A Brain keeps a session's state between passes; when its last pass appended a
    checkpoint, the next claim reuses the state from that checkpoint on."""
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    await append(store, "s1", [*turn(0), *turn(1)])
    kept = (await store.claim_session("s1", 2)).state
    await checkpoint(store, "s1", "summary")
    await append(store, "s1", turn(2))
    # As the pass left it (``SessionEdits.snapshot``): every entry it read and appended.
    state = await store.load("s1")
    assert state.session.version != kept.session.version
    known = type(state)(session=state.session, entries=state.entries)

    reused = (await store.claim_session("s1", 3, known)).state

    assert [e.seq for e in reused.entries] == list(range(9, 14))
    assert rebuilt(reused.entries) == rebuilt(state.entries)
