"""An OpenAI Agents SDK agent hosted by brainhands, for the tests (``--agents`` of a Brain
and ``--tools`` of a Hands, both with ``HOSTED_LEDGERS``, a folder).

Two agents: ``desk`` (``record``, a ``query`` tool; ``transfer``, ``unsafe``; ``pay``,
``unsafe`` with the SDK's ``needs_approval``), which can hand off to ``clerk`` (``file``,
``unsafe``). Their tools write to ledgers of their own (``tests.helpers.ledgers``). An input
guardrail trips on the prompt ``forbidden``.

Their model is a ``ScriptModel`` (an SDK ``Model``) that plays the script named by the
prompt, one step per answer: tool calls (a handoff is the SDK's ``transfer_to_clerk`` call),
or the output, whose ``seen`` lists what the agents were handed back (tool outputs) in
order and ``by`` the agent that answered. Every request it gets is appended to
``requests.jsonl`` as (instructions, input items).
"""

from __future__ import annotations

import json
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    Model,
    ModelResponse,
    RunContextWrapper,
    Usage,
    function_tool,
    input_guardrail,
)
from agents.testing import assistant_message, function_call
from pydantic import BaseModel

from brainhands import ToolPolicy
from brainhands.shared.hosted.openai_agents import host
from tests.helpers import ledgers
from tests.helpers.ledgers import effects, make_effect, recorded

__all__ = ["checks", "effects", "hosted"]

SCRIPTS: dict[str, list[Any]] = {
    "plain": [[("record", {"item": "apple"}), ("transfer", {"amount": 5})], "output"],
    "chaos": [[("transfer", {"amount": 5})], [("record", {"item": "apple"})], "output"],
    "handoff": [[("transfer_to_clerk", {})], [("file", {"paper": "deed"})], "output"],
    "approve": [[("pay", {"amount": 7}), ("pay", {"amount": 8})], "output"],
    "forbidden": ["output"],
}


class Report(BaseModel):
    summary: str
    by: str
    seen: list[str]


def seen(items: list[Any]) -> list[str]:
    """What the agents were handed back so far (tool outputs), in order."""
    names = {i["call_id"]: i["name"] for i in items if i.get("type") == "function_call"}
    return [
        f"{names[i['call_id']]}: {i['output']}"
        for i in items
        if i.get("type") == "function_call_output"
    ]


def log_request(instructions: str | None, items: list[Any]) -> None:
    with open(ledgers.LEDGERS / "requests.jsonl", "a") as log:
        log.write(json.dumps([instructions, items]) + "\n")


class ScriptModel(Model):
    """Plays the script its prompt names; the instructions tell it which agent asks."""

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        items = json.loads(json.dumps(items, default=str))
        log_request(system_instructions, items)
        prompt = items[0]["content"]
        calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
        answered = len({call.split("-")[1] for call in calls})
        step = SCRIPTS[prompt][answered]
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        if isinstance(step, list):
            output = [
                function_call(name, args, call_id=f"call-{answered}-{n}")
                for n, (name, args) in enumerate(step)
            ]
        else:
            by = "desk" if system_instructions == DESK else "clerk"
            report = Report(summary=prompt, by=by, seen=seen(items))
            output = [assistant_message(report.model_dump_json())]
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
async def record(item: str) -> str:
    """Record an item in the books."""
    make_effect("record", item)
    return f"recorded {item}"


@function_tool
async def transfer(amount: int) -> str:
    """Move money."""
    make_effect("transfer", str(amount))
    return f"transferred {amount}"


@function_tool(needs_approval=True)
async def pay(amount: int) -> str:
    """Pay out money (a person approves it first)."""
    make_effect("pay", str(amount))
    return f"paid {amount}"


@function_tool
async def file(paper: str) -> str:
    """File a paper."""
    make_effect("file", paper)
    return f"filed {paper}"


def log_check(text: str) -> None:
    with open(ledgers.LEDGERS / "guardrails.jsonl", "a") as log:
        log.write(json.dumps(text) + "\n")


def checks() -> list[str]:
    """The prompts the input guardrail checked, once per time it ran."""
    path = ledgers.LEDGERS / "guardrails.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@input_guardrail
async def allowed(ctx: RunContextWrapper[Any], agent: Agent[Any], text: Any) -> Any:
    log_check(text)
    return GuardrailFunctionOutput(output_info=text, tripwire_triggered=text == "forbidden")


DESK = "Keep the books."
model = ScriptModel()
clerk = Agent(
    name="clerk", instructions="File papers.", model=model, tools=[file], output_type=Report
)
desk = Agent(
    name="desk",
    instructions=DESK,
    model=model,
    tools=[record, transfer, pay],
    handoffs=[clerk],
    output_type=Report,
    input_guardrails=[allowed],
)

hosted = host(
    desk,
    name="desk",
    pool="desk",
    tools={"record": ToolPolicy(policy="query", query=recorded)},
)
