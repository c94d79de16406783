"""A Pydantic AI agent hosted by brainhands, for the tests (``--agents`` of a Brain and
``--tools`` of a Hands, both with ``HOSTED_LEDGERS``, a folder).

Its tools write to ledgers of their own (``tests.helpers.ledgers``): ``record`` (``query``:
its query looks the id up), ``transfer`` (``unsafe``), and ``pay`` (``unsafe``, Pydantic
AI's ``requires_approval``). ``record`` asks the model to try again (``ModelRetry``) for
an empty item.

Its model is a ``FunctionModel`` that plays the script named by the prompt, one step per
answer: tool calls, an output that fails validation, or the output, whose ``seen`` lists
what the agent was handed back (tool returns and retry prompts) in order. Every request
it gets is appended to ``requests.jsonl`` as the messages it was sent, without timestamps.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from brainhands import ToolPolicy
from brainhands.shared.hosted.pydantic_ai import host
from tests.helpers import ledgers
from tests.helpers.ledgers import effects, make_effect, recorded

__all__ = ["effects", "hosted"]

SCRIPTS: dict[str, list[Any]] = {
    "plain": [[("record", {"item": "apple"}), ("transfer", {"amount": 5})], "invalid", "output"],
    "chaos": [[("transfer", {"amount": 5})], [("record", {"item": "apple"})], "output"],
    "retry": [[("record", {"item": ""})], [("record", {"item": "pear"})], "output"],
    "approve": [[("pay", {"amount": 7}), ("pay", {"amount": 8})], "output"],
}


class Report(BaseModel):
    summary: str
    seen: list[str]


def seen(messages: list[ModelMessage]) -> list[str]:
    """What the agent was handed back so far, in order."""
    handed = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                said = json.dumps(part.content, sort_keys=True)
                # A retry prompt (a tool's ModelRetry, an output that did not validate).
                retried = "retry " if part.outcome == "retried" else ""
                handed.append(f"{retried}{part.tool_name}: {said}")
    return handed


def context(messages: list[ModelMessage]) -> list[list[dict[str, Any]]]:
    """The messages as the model reads them (no timestamps, run ids or usage)."""
    kept = ("part_kind", "content", "tool_name", "args", "tool_call_id")
    return [[{k: getattr(p, k, None) for k in kept} for p in m.parts] for m in messages]


def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    with open(ledgers.LEDGERS / "requests.jsonl", "a") as log:
        log.write(json.dumps(context(messages), default=str) + "\n")
    prompt = str(messages[0].parts[-1].content)
    answered = sum(isinstance(m, ModelResponse) for m in messages)
    step = SCRIPTS[prompt][answered]
    if isinstance(step, list):
        return ModelResponse(
            parts=[
                ToolCallPart(name, args, tool_call_id=f"call-{answered}-{n}")
                for n, (name, args) in enumerate(step)
            ]
        )
    output = info.output_tools[0].name
    args = {"summary": prompt} if step == "invalid" else {"summary": prompt, "seen": seen(messages)}
    return ModelResponse(parts=[ToolCallPart(output, args, tool_call_id=f"call-{answered}-out")])


agent = Agent(FunctionModel(play), instructions="Keep the books.", output_type=Report)


@agent.tool_plain
async def record(item: str) -> str:
    """Record an item in the books."""
    if not item:
        raise ModelRetry("name the item")
    make_effect("record", item)
    return f"recorded {item}"


@agent.tool_plain
async def transfer(amount: int) -> str:
    """Move money."""
    make_effect("transfer", str(amount))
    return f"transferred {amount}"


@agent.tool_plain(requires_approval=True)
async def pay(amount: int) -> str:
    """Pay out money (a person approves it first)."""
    make_effect("pay", str(amount))
    return f"paid {amount}"


hosted = host(
    agent,
    name="books",
    pool="books",
    tools={"record": ToolPolicy(policy="query", query=recorded)},
)
