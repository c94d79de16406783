"""``bench.hosted``'s agent on Pydantic AI: one ``ping`` call, then the answer.

Its model is a ``FunctionModel`` playing the script: a tool call while no answer was given
yet, then ``ANSWER``. The function is a coroutine, as a provider's client is: a plain
function would be run in a thread of its own at every request.
"""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bench.hosted_agents import ANSWER
from bench.roundtrip_tools import POOL
from brainhands import ToolPolicy
from brainhands.shared.hosted.pydantic_ai import host


async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[TextPart(ANSWER)])
    return ModelResponse(parts=[ToolCallPart("ping", {}, tool_call_id="call-0")])


agent = Agent(FunctionModel(play), instructions="You ping once, then say so.")


@agent.tool_plain
async def ping() -> str:
    """Answer at once."""
    return "pong"


hosted = host(agent, name="ping_pydantic_ai", pool=POOL, tools={"ping": ToolPolicy("safe")})
