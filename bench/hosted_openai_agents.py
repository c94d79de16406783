"""``bench.hosted``'s agent on the OpenAI Agents SDK: one ``ping`` call, then the answer.

Its model is an SDK ``Model`` playing the script: a tool call while the input holds no
tool output yet, then ``ANSWER``.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, Model, ModelResponse, Usage, function_tool
from agents.testing import assistant_message, function_call

from bench.hosted_agents import ANSWER
from bench.roundtrip_tools import POOL
from brainhands import ToolPolicy
from brainhands.shared.hosted.openai_agents import host


class ScriptModel(Model):
    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [] if isinstance(input, str) else input
        answered = any(
            isinstance(i, dict) and i.get("type") == "function_call_output" for i in items
        )
        output = [
            assistant_message(ANSWER) if answered else function_call("ping", {}, call_id="call-0")
        ]
        return ModelResponse(output=output, usage=Usage(requests=1), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
async def ping() -> str:
    """Answer at once."""
    return "pong"


agent = Agent(
    name="pinger", instructions="You ping once, then say so.", model=ScriptModel(), tools=[ping]
)

hosted = host(agent, name="ping_openai_agents", pool=POOL, tools={"ping": ToolPolicy("safe")})
