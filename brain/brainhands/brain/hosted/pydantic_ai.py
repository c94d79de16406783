"""The driver of hosted Pydantic AI agents (``brainhands.shared.hosted.pydantic_ai``).

The agent runs as its application built it, with two pieces in its place for the run:

- its model is wrapped (``JournalModel``): a request is answered from the journal, or sent
  to the agent's own model through Pydantic AI's model layer (any provider, configured as
  Pydantic AI configures it) and kept, once per pass;
- its toolsets are wrapped (``JournalToolset``): Pydantic AI validates a call's arguments
  as usual, then the call is answered from its journaled outcome (a ``ModelRetry`` where
  the tool asked for one; an uncertain, failed or refused call as the status the model
  reads), or deferred (``CallDeferred``), and the run ends with the deferred calls, which
  become durable calls of the tools. Calls Pydantic AI would hold for approval
  (``requires_approval``) reach the wrapper too: brainhands' approval decides them, once.

Output validation, output retries and tool retries are Pydantic AI's own: they are run
again at each pass against the same answers, and come out the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import (
    Agent,
    AgentRunResult,
    CallDeferred,
    DeferredToolRequests,
    ModelRetry,
    RunContext,
)
from pydantic_ai.exceptions import AgentRunError, ModelAPIError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.toolsets import CombinedToolset, ToolsetTool
from pydantic_ai.toolsets.wrapper import WrapperToolset
from pydantic_core import to_jsonable_python

from brainhands.brain.hosted.driver import Answered, Failed, Stop, WantsModel, WantsTools
from brainhands.brain.hosted.journal import Journal, ModelTurn, ToolRequest, TurnNeeded
from brainhands.shared.hosted import HostedAgent, read_reply


def encode(response: ModelResponse) -> Any:
    return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]


def decode(raw: Any) -> ModelResponse:
    [response] = ModelMessagesTypeAdapter.validate_python([raw])
    assert isinstance(response, ModelResponse), "a model entry holds a response"
    return response


class JournalModel(WrapperModel):
    """The agent's model, answering from the journal first."""

    def __init__(self, wrapped: Any, journal: Journal) -> None:
        super().__init__(wrapped)
        self.journal = journal
        self.asked = 0

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        n, self.asked = self.asked, self.asked + 1
        raw = self.journal.answer(n)
        if raw is not None:
            return decode(raw)
        if not self.journal.can_ask():
            raise TurnNeeded
        response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        usage = response.usage
        self.journal.record(
            ModelTurn(
                encode(response),
                self.wrapped.model_name,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
        )
        return response


@dataclass
class JournalToolset(WrapperToolset[Any]):
    """The agent's toolsets, answering calls from the journal first."""

    hosted: HostedAgent
    journal: Journal

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await super().get_tools(ctx)
        # Approval is brainhands' to ask for (``brain.approval``): the call comes here.
        return {
            name: replace(tool, tool_def=replace(tool.tool_def, kind="function"))
            if tool.tool_def.kind == "unapproved"
            else tool
            for name, tool in tools.items()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        call_id = ctx.tool_call_id or ""
        outcome = self.journal.outcomes.get(call_id)
        if outcome is None:
            hosted = self.hosted.tool(name)
            assert hosted is not None, f"{name!r} is a tool of the hosted agent"
            arguments = to_jsonable_python(tool_args)
            self.journal.wanted.append(
                ToolRequest(call_id, hosted.declared, arguments, hosted.approval)
            )
            raise CallDeferred
        if outcome["status"] != "succeeded":
            return {"status": outcome["status"], "error": outcome.get("error")}
        reply = read_reply(outcome["result"])
        if reply.kind == "retry":
            raise ModelRetry(reply.value)
        return reply.value


class PydanticAIDriver:
    """Runs one hosted Pydantic AI agent (``brain.hosted.driver.Driver``)."""

    def __init__(self, hosted: HostedAgent) -> None:
        self.hosted = hosted
        self.agent: Agent[Any, Any] = hosted.agent

    async def run(self, prompt: str, journal: Journal) -> Stop:
        agent = self.agent
        model = JournalModel(agent.model, journal)
        tools = JournalToolset(CombinedToolset(agent.toolsets), self.hosted, journal)
        try:
            with agent.override(model=model, toolsets=[tools], tools=[]):
                result: AgentRunResult[Any] = await agent.run(
                    prompt,
                    output_type=[agent.output_type, DeferredToolRequests],
                    deps=self.hosted.make_deps(),
                )
        except TurnNeeded:
            return WantsModel()
        except ModelAPIError:
            raise  # the provider failed (a 429, a 5xx): the pass is tried again
        except AgentRunError as exc:
            return Failed(f"{type(exc).__name__}: {exc}")
        if isinstance(result.output, DeferredToolRequests):
            if not journal.wanted:  # deferred by the agent's own code, not by the journal
                return Failed("the agent deferred tool calls itself, which cannot be hosted")
            return WantsTools(tuple(journal.wanted))
        return Answered(to_jsonable_python(result.output))
