"""An AgentScope agent hosted by brainhands, for the tests (``--agents`` of a Brain and
``--tools`` of a Hands, both with ``HOSTED_LEDGERS``, a folder).

One agent, ``till``, with three tools writing to ledgers of their own
(``tests.helpers.ledgers``): ``record`` (``query``) and ``transfer`` (``unsafe``), which
AgentScope's permission engine allows; ``pay`` (``unsafe``), for which it asks a person's
confirmation, as it does for any function tool given no permission.

Its model is a ``ScriptModel`` (an AgentScope ``ChatModelBase``) that plays the script
named by the prompt, one step per answer: tool calls, or the final text, a JSON object whose
``seen`` lists what the agent was handed back (tool results) in order. Every request it gets
is appended to ``requests.jsonl`` as the OpenAI messages AgentScope's formatter makes of it,
the clock AgentScope injects masked (``<current-time>`` is the time of the request).
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from agentscope.model import ChatModelBase, ChatResponse, ChatUsage
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, Toolkit

from brainhands import ToolPolicy
from brainhands.shared.hosted.agentscope import host
from tests.helpers import ledgers
from tests.helpers.ledgers import effects, make_effect, recorded

__all__ = ["ScriptModel", "effects", "hosted", "tools"]

SCRIPTS: dict[str, list[Any]] = {
    "plain": [[("record", {"item": "apple"}), ("transfer", {"amount": 5})], "output"],
    "chaos": [[("transfer", {"amount": 5})], [("record", {"item": "apple"})], "output"],
    "approve": [[("pay", {"amount": 7}), ("pay", {"amount": 8})], "output"],
}


def calls_and_results(messages: list[Msg]) -> tuple[list[ToolCallBlock], list[ToolResultBlock]]:
    blocks = [block for msg in messages for block in msg.get_content_blocks()]
    return (
        [b for b in blocks if isinstance(b, ToolCallBlock)],
        [b for b in blocks if isinstance(b, ToolResultBlock)],
    )


def seen(results: list[ToolResultBlock]) -> list[str]:
    """What the agent was handed back so far, in order."""
    said = []
    for block in results:
        text = (
            block.output
            if isinstance(block.output, str)
            else "".join(getattr(b, "text", "") for b in block.output)
        )
        said.append(f"{block.name}: {block.state}: {text}")
    return said


class ScriptModel(ChatModelBase):
    """Plays the script its prompt names."""

    def __init__(self, log: bool = True) -> None:
        super().__init__(
            OpenAICredential(api_key="none"), "script", ChatModelBase.Parameters(), stream=False
        )
        self.formatter = OpenAIChatFormatter()
        self.log = log
        self.asked = 0

    async def _call_api(
        self, model_name: str, messages: list[Msg], *args: Any, **kwargs: Any
    ) -> ChatResponse:
        self.asked += 1
        if self.log:
            log_request(await self.formatter.format(messages))
        prompt = next(m.get_text_content() for m in messages if m.role == "user")
        calls, results = calls_and_results(messages)
        answered = len({call.id.split("-")[1] for call in calls})
        step = SCRIPTS[str(prompt)][answered]
        content: list[Any]
        if isinstance(step, list):
            content = [
                ToolCallBlock(id=f"call-{answered}-{n}", name=name, input=json.dumps(args))
                for n, (name, args) in enumerate(step)
            ]
        else:
            content = [TextBlock(text=json.dumps({"summary": prompt, "seen": seen(results)}))]
        usage = ChatUsage(input_tokens=10, output_tokens=5, time=0.0)
        return ChatResponse(content=content, is_last=True, usage=usage)


def log_request(formatted: list[dict[str, Any]]) -> None:
    masked = re.sub(r"<current-time>[^<]*</current-time>", "<current-time/>", json.dumps(formatted))
    with open(ledgers.LEDGERS / "requests.jsonl", "a") as log:
        log.write(masked + "\n")


ALLOWED = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="allowed")


async def record(item: str) -> str:
    """Record an item in the books.

    Args:
        item (`str`): what to record.
    """
    make_effect("record", item)
    return f"recorded {item}"


async def transfer(amount: int) -> str:
    """Move money.

    Args:
        amount (`int`): how much.
    """
    make_effect("transfer", str(amount))
    return f"transferred {amount}"


async def pay(amount: int) -> str:
    """Pay out money (a person confirms it first).

    Args:
        amount (`int`): how much.
    """
    make_effect("pay", str(amount))
    return f"paid {amount}"


def tools() -> Toolkit:
    return Toolkit(
        tools=[
            FunctionTool(record, permission=ALLOWED),
            FunctionTool(transfer, permission=ALLOWED),
            FunctionTool(pay),
        ]
    )


till = Agent(name="till", system_prompt="Keep the books.", model=ScriptModel(), toolkit=tools())

hosted = host(
    till,
    name="till",
    pool="till",
    tools={"record": ToolPolicy(policy="query", query=recorded)},
)
