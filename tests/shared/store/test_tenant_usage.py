"""A tenant's usage is added in the commit that spends it, on both backends: to its
session's shard row, in the draft's own statement when it is committed alone, last and
summed per row in a group commit, and not at all when the guard refuses the draft or the
tenant has no budget (no rows)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from brainhands.shared.errors import ConflictError
from brainhands.shared.store import Draft, Store, TenantCharge, schema
from brainhands.shared.store.charges import SHARDS, shard_of
from brainhands.shared.store.commit import apply_drafts_sync

pytestmark = pytest.mark.integration


async def claimed(store: Store, session_id: str) -> None:
    await store.create_session(session_id, compat="v1")
    await store.claim_session_fence(session_id, 1)


def spending(session_id: str, version: int, charge: TenantCharge) -> Draft:
    """A draft recording an answer and charging ``charge`` for it."""
    draft = Draft(session_id, version=version, fence=1)
    draft.append_entry("model", {"usage": {"tokens": charge.tokens}})
    draft.charge_tenant(charge)
    return draft


async def rows(store: Store, tenant: str) -> dict[int, tuple[Any, ...]]:
    """The tenant's usage rows by shard: (tokens, cost, tool_calls)."""
    u = schema.tenant_usage
    query = select(u.c.shard, u.c.tokens, u.c.cost, u.c.tool_calls).where(u.c.tenant == tenant)
    async with store.backend.engine.connect() as conn:
        return {r.shard: (r.tokens, r.cost, r.tool_calls) for r in await conn.execute(query)}


async def test_a_charge_is_counted_in_its_commit_and_only_for_a_tenant_with_a_budget(
    store: Store,
) -> None:
    await store.tenant_budgets.set("acme", {"tokens": 1000}, by="operator")
    assert set(await rows(store, "acme")) == set(range(SHARDS))
    for key in ("acme/s1", "other/s1"):
        await claimed(store, key)
        await store.commit(spending(key, 0, TenantCharge(tokens=100, cost=0.5, tool_calls=2)))
    shard = shard_of("acme/s1")
    assert (await rows(store, "acme"))[shard] == (100, 0.5, 2)
    assert sum(r[0] for r in (await rows(store, "acme")).values()) == 100
    assert await rows(store, "other") == {}  # no budget: nothing counted, no rows
    budget = await store.tenant_budgets.get("acme")
    assert budget is not None
    assert budget.used == {"tokens": 100, "cost": 0.5, "tool_calls": 2}
    assert await store.tenant_budgets.get("other") is None

    # A draft whose guard is refused (the session moved on) counts nothing.
    with pytest.raises(ConflictError):
        await store.commit(spending("acme/s1", 0, TenantCharge(tokens=7)))
    assert (await rows(store, "acme"))[shard] == (100, 0.5, 2)


async def test_a_group_commit_adds_its_charges_summed_per_row_and_skips_refused_drafts(
    store: Store,
) -> None:
    await store.tenant_budgets.set("acme", {"tool_calls": 10}, by="operator")
    keys = [f"acme/s{n}" for n in range(4)]
    for key in keys:
        await claimed(store, key)
    drafts = [spending(key, 0, TenantCharge(tokens=10, tool_calls=1)) for key in keys[:3]]
    drafts.append(spending(keys[3], 5, TenantCharge(tokens=1000)))  # refused: not at 5
    results = await store.backend.write(
        lambda conn: apply_drafts_sync(
            conn, drafts, notify=False, chained=store.backend.chains_writes, handoff=store.handoff
        )
    )
    assert isinstance(results[3], ConflictError)
    expected: dict[int, tuple[int, float, int]] = {}
    for key in keys[:3]:
        tokens, cost, calls = expected.get(shard_of(key), (0, 0.0, 0))
        expected[shard_of(key)] = (tokens + 10, cost, calls + 1)
    found = await rows(store, "acme")
    assert {s: found[s] for s in expected} == expected
    budget = await store.tenant_budgets.get("acme")
    assert budget is not None and budget.used == {"tokens": 30, "cost": 0.0, "tool_calls": 3}


async def test_setting_a_budget_again_replaces_its_limits_and_keeps_what_was_spent(
    store: Store,
) -> None:
    first = await store.tenant_budgets.set("acme", {"tokens": 10, "cost": 1.0}, by="op1")
    await claimed(store, "acme/s1")
    await store.commit(spending("acme/s1", 0, TenantCharge(tokens=25)))
    again = await store.tenant_budgets.set("acme", {"tokens": 50}, by="op2")
    assert again.limits == {"tokens": 50} and again.set_by == "op2"
    assert again.used["tokens"] == 25 and again.created_at == first.created_at
    assert await store.tenant_budgets.tenants() == {"acme"}
