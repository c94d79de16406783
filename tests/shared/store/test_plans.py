"""The plans PostgreSQL caches for the hot statements of a new store read by index.

A connection keeps one generic plan for each prepared statement. Made while the tables are
a few pages, it would scan them whole, and go on doing so as they grow (until an ANALYZE):
the store's connections plan with sequential scans as the last resort
(``engine.PLANNER_SETTINGS``)."""

from __future__ import annotations

import re

import pytest
from sqlalchemy.dialects import postgresql

from brainhands.shared.store import Draft, Store
from brainhands.shared.store.backends.postgres.hot import compile_once
from brainhands.shared.store.backends.postgres.rows import _CLAIM
from brainhands.shared.store.hot import HotStatement
from brainhands.shared.store.ledger import _MARK_STARTED, _RECORD_OUTCOME_AND_EVENT

pytestmark = [
    pytest.mark.integration,
    pytest.mark.parametrize("store_target", ["postgres"], indirect=True),
]

HOT = {
    "the session claim": _CLAIM[False],
    "the session claim deferred to the first commit": _CLAIM[True],
    "the start of a call": _MARK_STARTED,
    "an outcome with its event": _RECORD_OUTCOME_AND_EVENT,
}


async def a_little_history(store: Store, sessions: int = 20) -> None:
    """A few sessions, each with a tool call under way, and fresh statistics: a store as
    small as a new one, planned for as it is."""
    ledger = store.ledger
    for i in range(sessions):
        session_id = f"s{i}"
        await store.create_session(session_id, compat="v1")
        await store.claim_session_fence(session_id, 1)
        draft = Draft(session_id, version=0, fence=1)
        task_id = draft.add_task(
            kind="brainhands.tool",
            kind_version=1,
            input={},
            status="waiting",
            operation_id=f"op{i}",
        )
        draft.append_entry("user", {"text": "hi"})
        await store.commit(draft)
        intent = {"session_id": session_id, "task_id": task_id, "tool": "t", "pool": "p"}
        await ledger.claim(f"op{i}", 1, intent={**intent, "arguments": {}})
    async with store.backend.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        assert driver is not None
        await driver.execute("ANALYZE")


async def generic_plan(store: Store, statement: HotStatement) -> str:
    """The plan a connection of ``store`` caches for ``statement`` once it goes generic."""
    sql = compile_once(statement, postgresql.asyncpg.dialect(), None).sql
    params = len(set(re.findall(r"\$(\d+)", sql)))
    async with store.backend.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        assert driver is not None
        await driver.execute("SET plan_cache_mode = force_generic_plan")
        await driver.execute(f"PREPARE hot AS {sql}")
        nulls = ", ".join(["NULL"] * params)
        rows = await driver.fetch(f"EXPLAIN EXECUTE hot({nulls})")
        await driver.execute("DEALLOCATE hot")
    return "\n".join(row[0] for row in rows)


@pytest.mark.parametrize("name", list(HOT))
async def test_a_hot_statement_of_a_new_store_reads_its_tables_by_index(
    store: Store, name: str
) -> None:
    await a_little_history(store)

    plan = await generic_plan(store, HOT[name])

    assert "Index Scan" in plan, plan
    assert "Seq Scan" not in plan, plan
