"""Budgets: a run stops at its budget at a durable boundary, across a Brain killed
mid-run, its usage in the view is what the model server billed, and a raise resumes it.
Real Brain and Hands processes, a real loopback HTTP model that counts its requests and
reports usage, the email service's ledger as the judge of what was sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.brain.budget_agents import PRICE
from tests.helpers.agent_run import AgentRun, agent_run
from tests.helpers.chat_server import ChatServer, completion
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
__all__ = ["agent_run"]  # the fixture

USAGE = (60, 40)
"""Prompt and completion tokens the server bills for every answer: 100 tokens each."""
AGENTS = "tests.brain.budget_agents"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    yield chat
    chat.close()


async def sent(run: AgentRun) -> list[str]:
    """Who the email service sent to, by its own ledger."""
    return sorted(s["recipient"] for s in (await run.email.ledger())["sends"])


def send(n: int) -> dict[str, Any]:
    """An answer asking for one email, to ``p<n>``."""
    arguments = json.dumps({"to": f"p{n}@example.com"})
    function = {"name": "send_safe", "arguments": arguments}
    call = {"id": f"call_{n}", "type": "function", "function": function}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return completion(message, "tool_calls", usage=USAGE)


async def test_a_run_stops_at_its_token_budget_across_a_kill_and_a_raise_resumes_it(
    agent_run: AgentRun, server: ChatServer
) -> None:
    for n in range(4):
        server.reply(200, send(n))
    server.reply(200, completion({"role": "assistant", "content": "All sent."}, usage=USAGE))
    brains, env = agent_run.brains, {**agent_run.extra, "TEST_MODEL_URL": server.base_url}
    # The first Brain dies right after the first answer (and its call) became durable.
    victim = brains.start_brain(tasks=None, agents=AGENTS, die_rule="after-entry:model", **env)
    agent_run.start_hands()
    async with brains.client() as client:
        await client.submit(
            "s1", "Send them.", agent="thrifty", request_id="r1", budget={"tokens": 300}
        )
        assert await asyncio.to_thread(victim.wait, 60) == 9
        assert len(server.received) == 1
        brains.start_brain(tasks=None, agents=AGENTS, **env)

        async def stopped() -> bool:
            return (await client.session("s1")).budget_exhausted is not None

        await eventually(stopped, within=90, what="the run to stop at its budget")
        view = await client.session("s1")
        stop = view.budget_exhausted
        assert stop is not None
        assert (view.status, view.needs_action, stop.limit) == ("budget_exhausted", True, "tokens")
        # The third answer spent the 300th token: no fourth request, its call not dispatched.
        assert len(server.received) == 3
        assert stop.used["tokens"] == 300 and stop.used["tool_calls"] == 2
        assert stop.used["model_calls"] == 3 and stop.budget == {"tokens": 300}
        # The view's usage is the sum of what each answer was billed, each counted once.
        assert view.usage["input_tokens"] == 3 * 60 and view.usage["output_tokens"] == 3 * 40
        assert view.usage["tokens"] == 300 and view.usage["model_calls"] == 3
        assert view.usage["cost"] == pytest.approx(3 * (60 * PRICE.input + 40 * PRICE.output) / 1e6)
        assert await sent(agent_run) == ["p0@example.com", "p1@example.com"]
        assert (await client.submission("s1", "r1").status()).status == "running"

        await client.raise_budget("s1", tokens=1000, raise_id="more")
        await client.raise_budget("s1", tokens=1000, raise_id="more")  # the same raise: once
        record = await client.wait("s1", "r1", timeout=90)

        assert record.status == "answered", record.error
        assert record.answer == {"text": "All sent.", "turns": 5}
        assert len(server.received) == 5  # nothing asked twice, before or after the stop
        view = await client.session("s1")
        assert (view.status, view.budget_exhausted, view.needs_action) == ("idle", None, False)
        assert view.usage["tokens"] == 500 and view.usage["model_calls"] == 5
    assert await sent(agent_run) == [f"p{n}@example.com" for n in range(4)]


async def test_a_run_over_its_agents_tool_call_budget_dispatches_nothing_until_raised(
    agent_run: AgentRun,
) -> None:
    brains = agent_run.brains
    brains.start_brain(tasks=None, agents=AGENTS, **agent_run.extra)
    agent_run.start_hands()
    async with brains.client() as client:
        await client.submit("s1", "Do the errand.", agent="frugal", request_id="r1")

        async def stopped(calls: int = 0) -> bool:
            stop = (await client.session("s1")).budget_exhausted
            return stop is not None and stop.used["tool_calls"] == calls

        await eventually(stopped, within=60, what="the run to stop at its budget")
        stop = (await client.session("s1")).budget_exhausted
        assert stop is not None and stop.limit == "tool_calls"
        assert stop.used["tool_calls"] == 0 and stop.budget == {"tool_calls": 1}
        assert (await client.session("s1")).operations == []  # its two calls wait, unsent

        await client.raise_budget("s1", tool_calls=2)  # still short of the errand's three
        # The first turn's two calls go; the second turn's one would be a third.
        await eventually(lambda: stopped(2), within=60, what="the second stop")
        stop = (await client.session("s1")).budget_exhausted
        assert stop is not None and stop.used["tool_calls"] == 2 and stop.budget["tool_calls"] == 2
        await client.raise_budget("s1", tool_calls=3)
        record = await client.wait("s1", "r1", timeout=60)
    assert record.status == "answered", record.error
    assert len((await agent_run.email.ledger())["sends"]) == 3
