"""The Pydantic AI driver, replayed pass by pass against a journal it is handed (no
services: what the hosted session would commit between passes is kept in memory here)."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset

from brainhands.brain.hosted.driver import Answered, Failed, WantsModel, WantsTools
from brainhands.brain.hosted.journal import Journal, ToolRequest
from brainhands.brain.hosted.pydantic_ai import PydanticAIDriver
from brainhands.shared.hosted import HostedAgent, HostedTool, returned
from brainhands.shared.hosted.pydantic_ai import FRAMEWORK


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    answered = sum(isinstance(m, ModelResponse) for m in messages)
    if answered == 0:
        return ModelResponse(parts=[ToolCallPart("add", {"a": 1, "b": "2"}, tool_call_id="c1")])
    if answered == 1:
        return ModelResponse(parts=[ToolCallPart("add", {"a": "x"}, tool_call_id="c2")])
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"response": 3})])


def driver() -> PydanticAIDriver:
    agent = Agent(FunctionModel(script), output_type=int)

    @agent.tool_plain
    async def add(a: int, b: int) -> int:
        raise AssertionError("a hosted tool never runs in the Brain")

    return PydanticAIDriver(HostedAgent("calc", FRAMEWORK, agent, (HostedTool("add", "calc.add"),)))


async def test_each_pass_asks_one_answer_and_replays_the_others() -> None:
    calc = driver()
    turns: list[Any] = []
    outcomes: dict[str, dict[str, Any]] = {}

    first = Journal(list(turns), dict(outcomes))
    stop = await calc.run("add 1 and 2", first)
    # The answer asked for, and its call as Pydantic AI validated it ("2" became 2).
    assert stop == WantsTools((ToolRequest("c1", "calc.add", {"a": 1, "b": 2}, False),))
    turns += [t.raw for t in first.fresh]
    outcomes["c1"] = {"status": "succeeded", "result": returned(3)}

    second = Journal(list(turns), dict(outcomes))
    stop = await calc.run("add 1 and 2", second)
    # The second answer's call did not validate: Pydantic AI's retry prompt, at the Brain,
    # and a third answer that this pass may not ask for.
    assert (stop, second.wanted) == (WantsModel(), [])
    turns += [t.raw for t in second.fresh]

    third = Journal(list(turns), dict(outcomes))
    assert await calc.run("add 1 and 2", third) == Answered(3)
    assert len(third.fresh) == 1 and len(turns) == 2


async def test_a_run_the_agent_defers_itself_fails_instead_of_waiting_for_nothing() -> None:
    asking = ToolDefinition(name="ask", parameters_json_schema={"type": "object"})

    def ask(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("ask", {}, tool_call_id="q")])

    agent = Agent(FunctionModel(ask), toolsets=[ExternalToolset([asking])])

    stop = await PydanticAIDriver(HostedAgent("asker", FRAMEWORK, agent)).run("hi", Journal([], {}))

    assert stop == Failed("the agent deferred tool calls itself, which cannot be hosted")


async def test_the_run_gets_its_deps_at_each_pass() -> None:
    def echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(info.instructions or "")])

    agent = Agent(FunctionModel(echo), deps_type=str)

    @agent.instructions
    def greet(ctx: RunContext[str]) -> str:
        return f"greet {ctx.deps}"

    hosted = HostedAgent("echo", FRAMEWORK, agent, deps=lambda: "ann")

    assert await PydanticAIDriver(hosted).run("hi", Journal([], {})) == Answered("greet ann")
