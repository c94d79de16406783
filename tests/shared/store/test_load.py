"""Reading a session back costs a fixed number of queries, whatever its size."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from shared.store import Draft, Store

pytestmark = pytest.mark.integration


async def count_load_queries(store: Store, session_id: str) -> int:
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", count)
    try:
        await store.load(session_id)
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", count)
    return len(statements)


async def grow(store: Store, session_id: str, entries: int, tasks: int, docs: int) -> None:
    state = await store.load(session_id)
    draft = Draft(session_id, version=state.session.version, fence=1)
    for i in range(entries):
        draft.append_entry("note", {"i": i})
    for _ in range(tasks):
        draft.add_task(kind="k", kind_version=1, input={})
    for i in range(docs):
        draft.put_document(f"d{i}", {"i": i}, expected_version=None)
    draft.add_submission(request_id=f"r{state.session.version}", input={})
    await store.commit(draft)


async def test_load_is_not_n_plus_one(store: Store) -> None:
    for sid in ("small", "large"):
        await store.create_session(sid, compat="v1")
        await store.claim_session_fence(sid, 1)
    await grow(store, "small", entries=1, tasks=1, docs=1)
    await grow(store, "large", entries=200, tasks=40, docs=10)

    small = await count_load_queries(store, "small")
    large = await count_load_queries(store, "large")

    assert small == large == 5
    state = await store.load("large")
    assert len(state.entries) == 200
    assert len(state.open_tasks) == 40
    assert len(state.documents) == 10
