"""The OpenAI Agents SDK driver, replayed pass by pass against a journal it is handed (no
services: what the hosted session would commit between passes is kept in memory here)."""

from __future__ import annotations

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

from brainhands.brain.hosted.driver import Answered, WantsModel, WantsTools
from brainhands.brain.hosted.journal import Journal, ToolRequest
from brainhands.brain.hosted.openai_agents import OpenAIAgentsDriver
from brainhands.shared.hosted import HostedAgent, HostedTool, returned
from brainhands.shared.hosted.openai_agents import FRAMEWORK


class Adder(Model):
    """Calls ``add`` twice, one answer each, then says what it was handed back."""

    def __init__(self) -> None:
        self.asked = 0

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        self.asked += 1
        outputs = [i["output"] for i in input if i.get("type") == "function_call_output"]
        step = len(outputs)
        output = (
            [function_call("add", {"a": 1, "b": step}, call_id=f"c{step}")]
            if step < 2
            else [assistant_message(" / ".join(outputs))]
        )
        return ModelResponse(output=output, usage=Usage(requests=1), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool(needs_approval=True)
async def add(a: int, b: int) -> int:
    raise AssertionError("a hosted tool never runs in the Brain")


def driver(model: Model) -> OpenAIAgentsDriver:
    agent = Agent(name="calc", model=model, tools=[add])
    return OpenAIAgentsDriver(
        HostedAgent("calc", FRAMEWORK, agent, (HostedTool("add", "calc.add", approval=True),))
    )


async def test_each_pass_asks_one_answer_and_replays_the_others() -> None:
    model = Adder()
    calc = driver(model)
    turns: list[Any] = []
    outcomes: dict[str, dict[str, Any]] = {}

    first = Journal(list(turns), dict(outcomes))
    # The SDK's needs_approval is left to brainhands: the call is wanted, marked so.
    assert await calc.run("add", first) == WantsTools(
        (ToolRequest("c0", "calc.add", {"a": 1, "b": 0}, True),)
    )
    turns += [t.raw for t in first.fresh]
    assert [t["agent"] for t in turns] == ["calc"]
    outcomes["c0"] = {"status": "succeeded", "result": returned(1)}

    second = Journal(list(turns), dict(outcomes))
    assert await calc.run("add", second) == WantsTools(
        (ToolRequest("c1", "calc.add", {"a": 1, "b": 1}, True),)
    )
    turns += [t.raw for t in second.fresh]
    outcomes["c1"] = {"status": "denied", "error": "not today"}

    third = Journal(list(turns), dict(outcomes))
    # The denied call is read as its status; the final answer is this pass's one ask.
    assert await calc.run("add", third) == Answered(
        '1 / {"status": "denied", "error": "not today"}'
    )
    assert model.asked == 3  # each answer asked for once, over the three passes

    again = Journal([*turns, *(t.raw for t in third.fresh)], dict(outcomes))
    assert await calc.run("add", again) == Answered(
        '1 / {"status": "denied", "error": "not today"}'
    )
    assert (model.asked, again.fresh) == (3, [])  # a replay asks nothing


async def test_a_pass_asks_one_answer_at_most() -> None:
    model = Adder()
    journal = Journal([], {"c0": {"status": "succeeded", "result": returned(1)}})

    assert await driver(model).run("add", journal) == WantsModel()
    assert (model.asked, len(journal.fresh)) == (1, 1)


async def test_a_guardrail_runs_once_and_its_kept_result_is_read_at_later_passes() -> None:
    ran: list[str] = []

    @input_guardrail
    async def polite(ctx: RunContextWrapper[Any], agent: Agent[Any], text: Any) -> Any:
        ran.append(text)
        return GuardrailFunctionOutput(output_info={"said": text}, tripwire_triggered=False)

    agent = Agent(name="calc", model=Adder(), tools=[add], input_guardrails=[polite])
    calc = OpenAIAgentsDriver(
        HostedAgent("calc", FRAMEWORK, agent, (HostedTool("add", "calc.add"),))
    )

    first = Journal([], {})
    await calc.run("add", first)
    assert first.taken == {
        "calc.input.0.polite": {"output_info": {"said": "add"}, "tripwire_triggered": False}
    }
    second = Journal([t.raw for t in first.fresh], {}, steps=dict(first.taken))
    await calc.run("add", second)

    assert (ran, second.taken) == (["add"], {})
