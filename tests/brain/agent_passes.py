"""Agents run in-process against a real store, one Brain pass at a time (each claiming the
session as a worker does), and a model that bills what it answers: for the context and
budget tests, which look at the store between passes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from brainhands.brain.agent import AgentRegistry, agent_kinds, start_agent_or_task
from brainhands.brain.models.base import Json, ModelResponse, TextSink
from brainhands.brain.models.openai import parse_chat_completion
from brainhands.brain.scheduler import SessionRunner
from brainhands.shared.store import Store
from brainhands.shared.store.catalog import ToolCatalog
from brainhands.shared.topology import Topology
from tests.helpers.chat_server import completion
from tests.helpers.submitting import submit_input

TOPOLOGY = Topology("agents")


async def submit(store: Store, session_id: str, request_id: str, input: dict[str, Any]) -> None:
    """Submit ``input`` (an agent's message) to the session, as a client does."""
    await submit_input(
        store,
        TOPOLOGY,
        session_id=session_id,
        request_id=request_id,
        input=input,
        compat="v1",
    )


async def run_pass(store: Store, agents: AgentRegistry, session_id: str) -> None:
    """One Brain pass over the session: claimed at the next fence, run, committed."""
    fence = (await store.load(session_id)).session.fence + 1
    claimed = await store.claim_session(session_id, fence)
    await SessionRunner(
        store=store,
        tasks=agent_kinds(agents, ToolCatalog(store)),
        tools=ToolCatalog(store),
        topology=TOPOLOGY,
        session_id=session_id,
        fence=fence,
        start_submission=start_agent_or_task,
    ).run(claimed)


async def run_until(
    store: Store,
    agents: AgentRegistry,
    session_id: str,
    done: Callable[[], Awaitable[bool]],
    *,
    passes: int = 10,
) -> None:
    """Run passes over the session until ``done``; AssertionError after ``passes``."""
    for _ in range(passes):
        await run_pass(store, agents, session_id)
        if await done():
            return
    raise AssertionError(f"session {session_id}: not done after {passes} passes")


@dataclass
class BilledModel:
    """A model whose answer to a request is ``answer(messages)`` (an assistant message),
    each answer billed ``usage`` (prompt and completion tokens), as a provider reports it."""

    answer: Callable[[list[Json]], Json]
    usage: tuple[int, int]
    name: str = "billed"
    asked: list[list[Json]] = field(default_factory=list)
    """The messages of every request, in order."""

    async def complete(
        self, messages: list[Json], tools: list[Json], *, on_text: TextSink | None = None
    ) -> ModelResponse:
        self.asked.append(messages)
        message = self.answer(messages)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return parse_chat_completion(completion(message, finish, usage=self.usage))

    def parse(self, raw: Json) -> ModelResponse:
        return parse_chat_completion(raw)

    async def aclose(self) -> None:
        """Nothing to close."""


def says(text: str) -> Callable[[list[Json]], Json]:
    """An ``answer`` that always says ``text``."""
    return lambda messages: {"role": "assistant", "content": text}


def tool_call(tool: str, call_id: str) -> Json:
    """An assistant message calling ``tool`` with no arguments."""
    call = {"id": call_id, "type": "function", "function": {"name": tool, "arguments": "{}"}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def calls(tool: str, times: int, then: str) -> Callable[[list[Json]], Json]:
    """An ``answer`` that calls ``tool`` until the conversation holds ``times`` tool
    results, then says ``then``."""

    def answer(messages: list[Json]) -> Json:
        done = sum(1 for m in messages if m.get("role") == "tool")
        if done >= times:
            return {"role": "assistant", "content": then}
        return tool_call(tool, f"call_{done}")

    return answer
