"""The driver of hosted OpenAI Agents SDK agents (``brainhands.shared.hosted.openai_agents``).

The run is the SDK's own ``Runner.run``, over copies of the agent and of every agent it hands
off to, each with two pieces in its place:

- its model is wrapped (``JournalModel``, an SDK ``Model``): a request is answered from the
  journal, or sent to the agent's own model (an SDK ``Model``, or a name the SDK's default
  provider resolves) and kept, once per pass. Each kept answer names the agent that gave it,
  so the session's history shows which agent answered, a handoff included;
- its function tools answer from their journaled outcomes (an uncertain, failed or denied
  call as the status the model reads); a call with none is noted as wanted, and the run
  stops at its next model request (``ToolsWanted``): the wanted calls become durable calls.
  Calls the SDK would hold for approval (``needs_approval``) come here too: brainhands'
  approval decides them, once.

Handoffs are the SDK's own: the model's answer that hands over is journaled, so a replay
hands over again, to the same agent. Input and output guardrails are durable steps
(``journaled_guardrail``): a guardrail's result is kept (``hosted_step``) with what the pass
reached, and a later pass reads it instead of running the guardrail again; one whose pass
did not commit (a Brain killed meanwhile) runs again.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from dataclasses import dataclass
from typing import Any, TypeVar

from agents import (
    Agent,
    AgentsException,
    FunctionTool,
    GuardrailFunctionOutput,
    InputGuardrail,
    Model,
    ModelResponse,
    OutputGuardrail,
    RunConfig,
    Runner,
    Usage,
)
from agents.items import TResponseOutputItem
from agents.models.multi_provider import MultiProvider
from agents.tool_context import ToolContext
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from brainhands.brain.hosted.driver import Answered, Failed, Stop, WantsModel, WantsTools
from brainhands.brain.hosted.journal import Journal, ModelTurn, ToolRequest, TurnNeeded
from brainhands.shared.hosted import HostedAgent, HostedTool, read_reply

OUTPUT = TypeAdapter(list[TResponseOutputItem])


class ToolsWanted(Exception):
    """Raised at the model request after tool calls with no journaled outcome."""


def encode(agent: str, response: ModelResponse) -> dict[str, Any]:
    usage = response.usage
    return {
        "agent": agent,
        "output": OUTPUT.dump_python(response.output, mode="json"),
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
    }


def decode(raw: dict[str, Any]) -> ModelResponse:
    spent = raw["usage"]
    usage = Usage(
        requests=1,
        input_tokens=spent["input_tokens"],
        output_tokens=spent["output_tokens"],
        total_tokens=spent["input_tokens"] + spent["output_tokens"],
    )
    output = OUTPUT.validate_python(raw["output"])
    return ModelResponse(output=output, usage=usage, response_id=None)


@dataclass
class Answers:
    """The run's model answers: the journal's, how many the run was given so far, and the
    SDK's default provider, for the agents whose model is a name."""

    journal: Journal
    provider: MultiProvider
    given: int = 0


class JournalModel(Model):
    """One agent's model, answering from the journal first."""

    def __init__(self, agent: Agent[Any], answers: Answers) -> None:
        self.agent = agent.name
        self.model = agent.model
        self.answers = answers

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        answers, journal = self.answers, self.answers.journal
        if journal.wanted:
            raise ToolsWanted
        raw = journal.answer(answers.given)
        if raw is not None:
            answers.given += 1
            return decode(raw)
        if not journal.can_ask():
            raise TurnNeeded
        model = (
            self.model if isinstance(self.model, Model) else answers.provider.get_model(self.model)
        )
        # A provider's error leaves the journal as it was: the pass is tried again.
        response = await model.get_response(*args, **kwargs)
        journal.record(
            ModelTurn(
                encode(self.agent, response),
                str(getattr(model, "model", None) or type(model).__name__),
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
            )
        )
        answers.given += 1
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a hosted run is not streamed")


def journaled_tool(tool: FunctionTool, hosted: HostedTool, journal: Journal) -> FunctionTool:
    """``tool``, answering its calls from the journal (approval is brainhands' to ask)."""

    async def invoke(ctx: ToolContext[Any], text: str) -> Any:
        outcome = journal.outcomes.get(ctx.tool_call_id)
        if outcome is None:
            arguments = json.loads(text) if text else {}
            journal.wanted.append(
                ToolRequest(ctx.tool_call_id, hosted.declared, arguments, hosted.approval)
            )
            return "pending"  # never read: the run stops at its next model request
        if outcome["status"] != "succeeded":
            return json.dumps({"status": outcome["status"], "error": outcome.get("error")})
        return read_reply(outcome["result"]).value

    return dataclasses.replace(tool, on_invoke_tool=invoke, needs_approval=False)


G = TypeVar("G", InputGuardrail[Any], OutputGuardrail[Any])


def journaled_guardrail(guardrail: G, key: str, journal: Journal) -> G:
    """``guardrail``, its result kept under ``key`` once it ran (its ``output_info`` as
    JSON), and read from the journal at every later pass."""
    check = guardrail.guardrail_function

    async def kept(*args: Any) -> GuardrailFunctionOutput:
        result = journal.step(key)
        if result is None:
            output = check(*args)
            if inspect.isawaitable(output):
                output = await output
            result = {
                "output_info": to_jsonable_python(output.output_info),
                "tripwire_triggered": output.tripwire_triggered,
            }
            journal.keep(key, result)
        return GuardrailFunctionOutput(**result)

    return dataclasses.replace(guardrail, guardrail_function=kept, name=guardrail.get_name())


class OpenAIAgentsDriver:
    """Runs one hosted OpenAI Agents SDK agent (``brain.hosted.driver.Driver``)."""

    def __init__(self, hosted: HostedAgent) -> None:
        self.hosted = hosted
        self.agent: Agent[Any] = hosted.agent
        self.provider = MultiProvider()  # one client for the Brain's life, made when first asked

    def copies(self, journal: Journal) -> Agent[Any]:
        """The agent and those it hands off to, copied with the journal's model and tools."""
        answers = Answers(journal, self.provider)
        made: dict[int, Agent[Any]] = {}

        def copy(agent: Agent[Any]) -> Agent[Any]:
            if id(agent) in made:
                return made[id(agent)]
            tools = []
            for tool in agent.tools:
                assert isinstance(tool, FunctionTool), "host() takes function tools only"
                hosted = self.hosted.tool(tool.name)
                assert hosted is not None, f"{tool.name!r} is a tool of the hosted agent"
                tools.append(journaled_tool(tool, hosted, journal))
            made[id(agent)] = twin = agent.clone(
                model=JournalModel(agent, answers),
                tools=tools,
                input_guardrails=[
                    journaled_guardrail(g, f"{agent.name}.input.{n}.{g.get_name()}", journal)
                    for n, g in enumerate(agent.input_guardrails)
                ],
                output_guardrails=[
                    journaled_guardrail(g, f"{agent.name}.output.{n}.{g.get_name()}", journal)
                    for n, g in enumerate(agent.output_guardrails)
                ],
            )
            twin.handoffs = [copy(target) for target in agent.handoffs]  # type: ignore[arg-type]
            return twin

        return copy(self.agent)

    async def run(self, prompt: str, journal: Journal) -> Stop:
        try:
            result = await Runner.run(
                self.copies(journal),
                prompt,
                context=self.hosted.make_deps(),
                run_config=RunConfig(tracing_disabled=True),
            )
        except TurnNeeded:
            return WantsModel()
        except ToolsWanted:
            return WantsTools(tuple(journal.wanted))
        except AgentsException as exc:
            return Failed(f"{type(exc).__name__}: {exc}")
        if journal.wanted:  # the run ended on a tool's call (tool_use_behavior)
            return WantsTools(tuple(journal.wanted))
        return Answered(to_jsonable_python(result.final_output))
