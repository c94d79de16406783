"""A tenant's budget holds all its sessions' runs together: a run stops at it at a durable
boundary (its stop scoped ``tenant``), a second session of the tenant stops at its first,
another tenant's sessions run on and count nothing, and an operator's raise of the tenant's
budget resumes both. In-process Brain passes against real stores (both backends)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import update

from brainhands.brain.agent import Agent, AgentRegistry
from brainhands.brain.budget import TENANT_RECHECK
from brainhands.client.budgets import (
    BudgetStop,
    budget_stop_of,
    raise_budget,
    set_tenant_budget,
)
from brainhands.shared.errors import DecisionRefused, InvalidRequest
from brainhands.shared.store import Store, schema
from brainhands.shared.vocabulary import BUDGET_SIGNAL
from tests.brain.agent_passes import BilledModel, calls, run_pass, run_until, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOKENS = 250
"""The tenant's budget: each answer bills 100 tokens, so its usage reaches 250 with the
third answer, and no fourth is asked."""


def note_taker() -> tuple[AgentRegistry, BilledModel]:
    """An agent that asks for ``note`` (not granted: refused, never dispatched) until the
    session holds 3 tool results, then says ``done``; 100 tokens an answer."""
    model = BilledModel(calls("note", 3, "done"), usage=(60, 40))
    agents = AgentRegistry()
    agents.add(Agent(name="notes", system="You take notes.", model=model))
    return agents, model


async def stop_of(store: Store, session_id: str) -> BudgetStop | None:
    return budget_stop_of((await store.load(session_id)).open_tasks)


async def status(store: Store, session_id: str) -> str:
    return (await store.submissions.get(session_id, "r1")).status


async def start(store: Store, session_id: str) -> None:
    await submit(store, session_id, "r1", {"agent": "notes", "text": "Take notes."})


async def test_runs_of_a_tenant_stop_at_its_budget_others_run_on_and_a_raise_resumes_them(
    store: Store,
) -> None:
    agents, model = note_taker()
    await set_tenant_budget(store, "acme", {"tokens": TOKENS}, None, "operator")
    await start(store, "acme/s1")

    async def stopped() -> bool:
        return await stop_of(store, "acme/s1") is not None

    await run_until(store, agents, "acme/s1", stopped)
    first = await stop_of(store, "acme/s1")
    assert first is not None
    assert (first.scope, first.limit, first.budget) == ("tenant", "tokens", {"tokens": TOKENS})
    assert first.used == {"tokens": 300, "cost": 0.0, "tool_calls": 0}
    assert len(model.asked) == 3  # stopped before the fourth model call
    # The run's own raise does not lift its tenant's stop.
    with pytest.raises(DecisionRefused, match="tenant's budget"):
        await raise_budget(store, "acme/s1", {"tokens": 10_000}, None, "operator")

    # A second session of the tenant stops at its first boundary: no model call at all.
    await start(store, "acme/s2")

    async def second_stopped() -> bool:
        return await stop_of(store, "acme/s2") is not None

    await run_until(store, agents, "acme/s2", second_stopped)
    assert len(model.asked) == 3

    # Another tenant's session, with no budget, runs to its answer and counts nothing.
    await start(store, "other/s1")

    async def other_answered() -> bool:
        return await status(store, "other/s1") == "answered"

    await run_until(store, agents, "other/s1", other_answered)
    assert len(model.asked) == 7
    assert await store.tenant_budgets.get("other") is None
    budget = await store.tenant_budgets.get("acme")
    assert budget is not None and budget.used["tokens"] == 300

    # The operator raises the tenant's budget: both stopped runs are sent the raise, once.
    raised = await set_tenant_budget(store, "acme", {"tokens": 10_000}, None, "operator")
    assert raised.resumed == 2 and raised.budget.used["tokens"] == 300
    again = await set_tenant_budget(store, "acme", {"tokens": 10_000}, None, "operator")
    assert again.resumed == 0  # the same stops: their raise was sent already

    for key in ("acme/s1", "acme/s2"):

        async def answered(key: str = key) -> bool:
            return await status(store, key) == "answered"

        await run_until(store, agents, key, answered)
    assert (await store.submissions.get("acme/s1", "r1")).answer == {"text": "done", "turns": 4}
    budget = await store.tenant_budgets.get("acme")
    # s1's fourth answer, s2's four: 100 tokens each, counted once.
    assert budget is not None and budget.used["tokens"] == 300 + 100 + 400
    assert len(model.asked) == 12


async def test_a_raise_that_still_leaves_the_tenant_over_stops_its_run_again(
    store: Store,
) -> None:
    agents, model = note_taker()
    await set_tenant_budget(store, "acme", {"tokens": 100}, None, "operator")
    await start(store, "acme/s1")

    async def stopped() -> bool:
        return await stop_of(store, "acme/s1") is not None

    await run_until(store, agents, "acme/s1", stopped)
    first = await stop_of(store, "acme/s1")
    assert first is not None and first.used["tokens"] == 100
    await set_tenant_budget(store, "acme", {"tokens": 100, "cost": 5.0}, None, "operator")
    await run_pass(store, agents, "acme/s1")
    second = await stop_of(store, "acme/s1")
    assert second is not None and second.since > first.since
    assert second.budget == {"tokens": 100, "cost": 5.0} and len(model.asked) == 1


async def test_a_tenant_budget_is_checked_before_it_is_kept(store: Store) -> None:
    for limits in ({}, {"seconds": 5}, {"tokens": -1}, {"calls": 3}):
        with pytest.raises(InvalidRequest):
            await set_tenant_budget(store, "acme", limits, None, "operator")
    with pytest.raises(InvalidRequest):
        await set_tenant_budget(store, "no/slash", {"tokens": 1}, None, "operator")
    assert await store.tenant_budgets.tenants() == set()


async def test_a_run_stopped_after_the_raise_scanned_looks_again_and_goes_on(
    store: Store,
) -> None:
    # The raise's scan ran before the stop was committed (its Brain read the old limits):
    # the stop waits for a raise no one will send, for TENANT_RECHECK seconds at most.
    agents, model = note_taker()
    await set_tenant_budget(store, "acme", {"tokens": 100}, None, "operator")
    await start(store, "acme/s1")

    async def stopped() -> bool:
        return await stop_of(store, "acme/s1") is not None

    await run_until(store, agents, "acme/s1", stopped)
    await store.tenant_budgets.set("acme", {"tokens": 10_000}, by="operator")  # no scan
    [waiting] = [t for t in (await store.load("acme/s1")).open_tasks if t.wait_signal]
    assert waiting.wait_signal == BUDGET_SIGNAL
    assert waiting.wake_at == pytest.approx(time.time() + TENANT_RECHECK, abs=5)
    await run_pass(store, agents, "acme/s1")
    assert await stop_of(store, "acme/s1") is not None  # before its time: still stopped

    async with store.backend.engine.begin() as conn:  # its time has come
        task = schema.task
        await conn.execute(update(task).where(task.c.id == waiting.id).values(wake_at=0.0))

    async def answered() -> bool:
        return await status(store, "acme/s1") == "answered"

    await run_until(store, agents, "acme/s1", answered)
    assert len(model.asked) == 4
