"""``bench.hosted``'s agent on AgentScope: one ``ping`` call, then the answer.

Its model is an AgentScope ``ChatModelBase`` playing the script: a tool call while the
messages hold no tool result yet, then ``ANSWER``. ``ping`` is given permission, so
AgentScope asks no person before it runs.
"""

from __future__ import annotations

from typing import Any

from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from agentscope.model import ChatModelBase, ChatResponse, ChatUsage
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, Toolkit

from bench.hosted_agents import ANSWER
from bench.roundtrip_tools import POOL
from brainhands import ToolPolicy
from brainhands.shared.hosted.agentscope import host


class ScriptModel(ChatModelBase):
    def __init__(self) -> None:
        super().__init__(
            OpenAICredential(api_key="none"), "script", ChatModelBase.Parameters(), stream=False
        )
        self.formatter = OpenAIChatFormatter()  # what AgentScope's agent formats messages with

    async def _call_api(
        self, model_name: str, messages: list[Msg], *args: Any, **kwargs: Any
    ) -> ChatResponse:
        answered = any(
            isinstance(block, ToolResultBlock)
            for message in messages
            for block in message.get_content_blocks()
        )
        content: list[Any] = (
            [TextBlock(text=ANSWER)]
            if answered
            else [ToolCallBlock(id="call-0", name="ping", input="{}")]
        )
        return ChatResponse(
            content=content, is_last=True, usage=ChatUsage(input_tokens=1, output_tokens=1, time=0)
        )


async def ping() -> str:
    """Answer at once."""
    return "pong"


ALLOWED = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="allowed")

agent = Agent(
    name="pinger",
    system_prompt="You ping once, then say so.",
    model=ScriptModel(),
    toolkit=Toolkit(tools=[FunctionTool(ping, permission=ALLOWED)]),
)

hosted = host(agent, name="ping_agentscope", pool=POOL, tools={"ping": ToolPolicy("safe")})
