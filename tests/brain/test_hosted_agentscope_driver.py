"""The AgentScope driver, replayed pass by pass against a journal it is handed (no services:
what the hosted session would commit between passes is kept in memory here)."""

from __future__ import annotations

import json
from typing import Any

from agentscope.agent import Agent, ReActConfig
from agentscope.credential import OpenAICredential
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from agentscope.model import ChatModelBase, ChatResponse, ChatUsage
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, Toolkit
from pydantic import BaseModel

from brainhands.brain.hosted.agentscope import AgentScopeDriver
from brainhands.brain.hosted.driver import Answered, Failed, WantsModel, WantsTools
from brainhands.brain.hosted.journal import Journal, ToolRequest
from brainhands.shared.hosted import HostedAgent, HostedTool, returned
from brainhands.shared.hosted.agentscope import FRAMEWORK

ALLOWED = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="allowed")


class Adder(ChatModelBase):
    """Calls ``add`` ``times`` times, one answer each, then says what it was handed back."""

    def __init__(self, times: int = 2) -> None:
        super().__init__(
            OpenAICredential(api_key="none"), "adder", ChatModelBase.Parameters(), stream=False
        )
        self.formatter = OpenAIChatFormatter()
        self.times = times
        self.asked = 0

    async def _call_api(self, model: str, messages: list[Msg], *a: Any, **k: Any) -> Any:
        self.asked += 1
        blocks = [b for m in messages for b in m.get_content_blocks()]
        results = [b for b in blocks if isinstance(b, ToolResultBlock)]
        step = len(results)
        said = [
            f"{b.state}: {b.output if isinstance(b.output, str) else b.output[0].text}"
            for b in results
        ]
        content: list[Any] = (
            [ToolCallBlock(id=f"c{step}", name="add", input=json.dumps({"a": 1, "b": step}))]
            if step < self.times
            else [TextBlock(text=" / ".join(said))]
        )
        usage = ChatUsage(input_tokens=7, output_tokens=3, time=0.0)
        return ChatResponse(content=content, is_last=True, usage=usage)


async def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a (`int`): one.
        b (`int`): the other.
    """
    raise AssertionError("a hosted tool never runs in the Brain")


def driver(model: Adder, **tool: Any) -> AgentScopeDriver:
    toolkit = Toolkit(tools=[FunctionTool(add, **tool)])
    agent = Agent(name="calc", system_prompt="Add.", model=model, toolkit=toolkit)
    return AgentScopeDriver(HostedAgent("calc", FRAMEWORK, agent, (HostedTool("add", "calc.add"),)))


def succeeded(text: str) -> dict[str, Any]:
    """A call's outcome as a Hands records it (``shared.hosted.agentscope``)."""
    output = [{"type": "text", "text": text}]
    return {
        "status": "succeeded",
        "result": returned({"output": output, "state": "success", "metadata": {}}),
    }


async def test_each_pass_asks_one_answer_and_replays_the_others() -> None:
    model = Adder()
    calc = driver(model, permission=ALLOWED)
    turns: list[Any] = []
    outcomes: dict[str, dict[str, Any]] = {}

    first = Journal(list(turns), dict(outcomes))
    assert await calc.run("add", first) == WantsTools(
        (ToolRequest("c0", "calc.add", {"a": 1, "b": 0}, False),)
    )
    turns += [t.raw for t in first.fresh]
    assert first.fresh[0].usage().tokens == 10
    outcomes["c0"] = succeeded("1")

    second = Journal(list(turns), dict(outcomes))
    assert await calc.run("add", second) == WantsTools(
        (ToolRequest("c1", "calc.add", {"a": 1, "b": 1}, False),)
    )
    turns += [t.raw for t in second.fresh]
    outcomes["c1"] = {"status": "uncertain", "error": "its Hands died while it ran"}

    third = Journal(list(turns), dict(outcomes))
    # The uncertain call reaches the agent as an error result holding its status.
    answered = Answered(
        'success: 1 / error: {"status": "uncertain", "error": "its Hands died while it ran"}'
    )
    assert await calc.run("add", third) == answered
    assert model.asked == 3  # each answer asked for once, over the three passes

    again = Journal([*turns, *(t.raw for t in third.fresh)], dict(outcomes))
    assert await calc.run("add", again) == answered
    assert (model.asked, again.fresh) == (3, [])  # a replay asks nothing


async def test_a_pass_asks_one_answer_at_most() -> None:
    model = Adder()
    journal = Journal([], {"c0": succeeded("1")})

    assert await driver(model, permission=ALLOWED).run("add", journal) == WantsModel()
    assert (model.asked, len(journal.fresh)) == (1, 1)


async def test_a_call_agentscope_asks_to_confirm_is_an_approval_and_a_denial_its_own() -> None:
    model = Adder(times=1)
    calc = driver(model)  # no permission given: AgentScope asks a person for each call

    first = Journal([], {})
    assert await calc.run("add", first) == WantsTools(
        (ToolRequest("c0", "calc.add", {"a": 1, "b": 0}, True),)
    )
    denied = {"c0": {"status": "denied", "error": "denied by ana: no"}}
    second = Journal([t.raw for t in first.fresh], denied)

    answered = await calc.run("add", second)

    assert answered == Answered(
        'denied: <system-reminder>The execution of tool "add" is denied by user!</system-reminder>'
    )
    approved = Journal([t.raw for t in first.fresh], {"c0": succeeded("1")})
    assert await calc.run("add", approved) == Answered("success: 1")


async def test_sequential_tools_are_dispatched_one_at_a_time() -> None:
    class Both(Adder):
        async def _call_api(self, model: str, messages: list[Msg], *a: Any, **k: Any) -> Any:
            if self.asked:
                return await super()._call_api(model, messages)
            self.asked += 1
            calls = [
                ToolCallBlock(id=f"c{n}", name="add", input='{"a": 1, "b": 1}') for n in (0, 1)
            ]
            return ChatResponse(content=calls, is_last=True)

    calc = driver(Both(), permission=ALLOWED, is_concurrency_safe=False)

    first = Journal([], {})
    assert await calc.run("add", first) == WantsTools(
        (ToolRequest("c0", "calc.add", {"a": 1, "b": 1}, False),)
    )
    second = Journal([t.raw for t in first.fresh], {"c0": succeeded("2")})
    assert await calc.run("add", second) == WantsTools(
        (ToolRequest("c1", "calc.add", {"a": 1, "b": 1}, False),)
    )


async def test_a_reply_past_its_max_iterations_fails_the_run() -> None:
    model = Adder(times=5)
    toolkit = Toolkit(tools=[FunctionTool(add, permission=ALLOWED)])
    agent = Agent(
        name="calc",
        system_prompt="Add.",
        model=model,
        toolkit=toolkit,
        react_config=ReActConfig(max_iters=1),
    )
    calc = AgentScopeDriver(HostedAgent("calc", FRAMEWORK, agent, (HostedTool("add", "calc.add"),)))
    turns: list[Any] = []
    outcomes = {f"c{n}": succeeded(str(n)) for n in range(5)}

    stop: Any = WantsModel()
    while stop == WantsModel() or isinstance(stop, WantsTools):
        journal = Journal(list(turns), outcomes)
        stop = await calc.run("add", journal)
        turns += [t.raw for t in journal.fresh]

    assert isinstance(stop, Failed) and "exceed_max_iters" in stop.error


async def test_a_structured_output_asked_for_is_the_answer_as_agentscope_validated_it() -> None:
    class Total(BaseModel):
        total: int

    class Totaller(Adder):
        """Adds once, then gives its total through AgentScope's structured-output tool."""

        async def _call_api(self, model: str, messages: list[Msg], *a: Any, **k: Any) -> Any:
            if not self.asked:
                return await super()._call_api(model, messages)
            self.asked += 1
            total = ToolCallBlock(id="out", name="GenerateStructuredOutput", input='{"total": 3}')
            return ChatResponse(content=[total], is_last=True)

    toolkit = Toolkit(tools=[FunctionTool(add, permission=ALLOWED)])
    agent = Agent(name="calc", system_prompt="Add.", model=Totaller(), toolkit=toolkit)
    tools = (HostedTool("add", "calc.add"),)
    calc = AgentScopeDriver(HostedAgent("calc", FRAMEWORK, agent, tools, output=Total))

    first = Journal([], {})
    assert await calc.run("add", first) == WantsTools(
        (ToolRequest("c0", "calc.add", {"a": 1, "b": 0}, False),)
    )
    second = Journal([t.raw for t in first.fresh], {"c0": succeeded("1")})

    assert await calc.run("add", second) == Answered({"total": 3})
