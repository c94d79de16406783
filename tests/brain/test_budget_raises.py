"""A budget raise lifts the stop it was sent for and no other: one sent while no run is
stopped is refused, and one that reaches a later stop -- of the same run, or of a later
run -- is used up without lifting it. In-process Brain passes against real stores, so the
test decides what reaches the session between them."""

from __future__ import annotations

import pytest

from brainhands.brain.agent import Agent, AgentRegistry
from brainhands.client.budgets import BudgetStop, budget_stop_of, raise_budget
from brainhands.shared.errors import DecisionRefused
from brainhands.shared.store import InboxReceipt, Store
from brainhands.shared.vocabulary import BUDGET_SIGNAL
from tests.brain.agent_passes import BilledModel, calls, run_until, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BUDGET = {"tokens": 150}
"""A run's budget: each answer bills 100 tokens, so a run stops before its third turn."""


def thrifty() -> tuple[AgentRegistry, BilledModel]:
    """An agent that asks for ``note`` (which it is not granted: refused, never dispatched)
    until the session holds 3 tool results, then says ``done``; 100 tokens an answer."""
    model = BilledModel(calls("note", 3, "done"), usage=(60, 40))
    agents = AgentRegistry()
    agents.add(Agent(name="thrifty", system="You take notes.", model=model))
    return agents, model


async def stop_of(store: Store) -> BudgetStop | None:
    return budget_stop_of((await store.load("s1")).open_tasks)


async def stopped_at(store: Store, agents: AgentRegistry, tokens: int) -> BudgetStop:
    """Run passes until the session's run stops having spent ``tokens``."""

    async def there() -> bool:
        stop = await stop_of(store)
        return stop is not None and stop.used["tokens"] == tokens

    await run_until(store, agents, "s1", there)
    stop = await stop_of(store)
    assert stop is not None
    return stop


async def raise_to(store: Store, tokens: int, raise_id: str | None = None) -> InboxReceipt:
    return await raise_budget(store, "s1", {"tokens": tokens}, None, "operator", raise_id)


async def applied(store: Store, agents: AgentRegistry, receipt: InboxReceipt) -> None:
    """Run passes until the raise of ``receipt`` has been received by a wait."""

    async def received() -> bool:
        sent = await store.inbox.of_session("s1")
        return any(r.id == receipt.request.id and r.applied_at is not None for r in sent)

    await run_until(store, agents, "s1", received)


async def status(store: Store, request_id: str) -> str:
    return (await store.submissions.get("s1", request_id)).status


async def test_a_raise_is_refused_while_no_run_is_stopped_and_a_retried_one_is_sent_once(
    store: Store,
) -> None:
    agents, _ = thrifty()
    await submit(store, "s1", "r1", {"agent": "thrifty", "text": "Take notes.", "budget": BUDGET})
    with pytest.raises(DecisionRefused, match="no run of this session is stopped"):
        await raise_to(store, 1000)  # the run has not stopped: nothing is kept for later
    await stopped_at(store, agents, 200)
    assert (await raise_to(store, 1000, "more")).created

    async def answered() -> bool:
        return await status(store, "r1") == "answered"

    await run_until(store, agents, "s1", answered)
    again = await raise_to(store, 1000, "more")  # a retry, after the run went on: the same
    assert not again.created and again.signal_id == "more"
    with pytest.raises(DecisionRefused):
        await raise_to(store, 1000, "other")
    raises = [r for r in await store.inbox.of_session("s1") if r.name == BUDGET_SIGNAL]
    assert [r.key for r in raises] == ["brainhands.budget:more"]  # in the raises' namespace


async def test_a_second_raise_of_one_stop_does_not_lift_the_runs_next_stop(
    store: Store,
) -> None:
    agents, model = thrifty()
    await submit(store, "s1", "r1", {"agent": "thrifty", "text": "Take notes.", "budget": BUDGET})
    first = await stopped_at(store, agents, 200)  # before the third turn
    # Two raises of the first stop, before any Brain looks: the first lifts it to 250, which
    # the third answer passes; the second, sent for a stop that is over, must not lift that.
    little = await raise_to(store, 250, "little")
    stale = await raise_to(store, 10_000, "stale")
    second = await stopped_at(store, agents, 300)
    assert second.since > first.since and second.budget == {"tokens": 250}
    await applied(store, agents, stale)
    assert await stop_of(store) == second  # used up, lifting nothing
    assert await status(store, "r1") == "running" and len(model.asked) == 3
    sent = {r.key: r.body["payload"] for r in await store.inbox.of_session("s1")}
    assert sent[little.request.key]["stop"] == {"task_id": first.task_id, "at": first.since}

    await raise_to(store, 10_000)

    async def answered() -> bool:
        return await status(store, "r1") == "answered"

    await run_until(store, agents, "s1", answered)
    assert len(model.asked) == 4  # nothing asked twice
    assert (await store.submissions.get("s1", "r1")).answer == {"text": "done", "turns": 4}


async def test_a_raise_left_by_a_cancelled_run_does_not_lift_a_later_runs_stop(
    store: Store,
) -> None:
    agents, model = thrifty()
    await submit(store, "s1", "r1", {"agent": "thrifty", "text": "Take notes.", "budget": BUDGET})
    first = await stopped_at(store, agents, 200)
    # The run is cancelled, and a raise of its stop sent before any Brain carries that out.
    await store.inbox.send_request(session_id="s1", kind="cancel", key="r1", wake=None)
    left = await raise_to(store, 10_000, "left")

    async def cancelled() -> bool:
        return await status(store, "r1") == "cancelled"

    await run_until(store, agents, "s1", cancelled)
    assert await stop_of(store) is None
    unapplied = [r for r in await store.inbox.of_session("s1") if r.applied_at is None]
    assert [r.key for r in unapplied] == ["brainhands.budget:left"]  # kept: no wait for it any more

    # A later run of the session stops at its own budget: the leftover raise reaches its
    # wait, and lifts nothing.
    # Its first answer (100 tokens) passes its budget of 50: it stops before its second.
    more = {"agent": "thrifty", "text": "More notes.", "budget": {"tokens": 50}}
    await submit(store, "s1", "r2", more)
    later = await stopped_at(store, agents, 100)
    assert later.task_id != first.task_id
    await applied(store, agents, left)
    assert await stop_of(store) == later
    assert await status(store, "r2") == "running"
    asked = len(model.asked)

    await raise_to(store, 1_000)

    async def answered() -> bool:
        return await status(store, "r2") == "answered"

    await run_until(store, agents, "s1", answered)
    assert len(model.asked) == asked + 1
