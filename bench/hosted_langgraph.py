"""``bench.hosted``'s agent on LangGraph: a ReAct graph (a model node, a ``ToolNode`` of
``ping``) that calls ``ping`` once, then answers.

Its model is a chat model of its own playing the script: a tool call while no tool message
came back yet, then ``ANSWER``. It answers in the event loop (``_agenerate``), as a
provider's client does: LangChain runs a model with only ``_generate`` in a thread.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from bench.hosted_agents import ANSWER
from bench.roundtrip_tools import POOL
from brainhands import ToolPolicy
from brainhands.shared.hosted.langgraph import host


class ScriptModel(BaseChatModel):
    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        return self.play(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        return self.play(messages)

    def play(self, messages: list[BaseMessage]) -> ChatResult:
        if any(isinstance(m, ToolMessage) for m in messages):
            message = AIMessage(ANSWER)
        else:
            call = {"name": "ping", "args": {}, "id": "call-0", "type": "tool_call"}
            message = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


model = ScriptModel()


async def think(state: State) -> dict[str, Any]:
    return {"messages": [await model.ainvoke(state["messages"])]}


@tool
async def ping() -> str:
    """Answer at once."""
    return "pong"


builder = StateGraph(State)
builder.add_node("model", think)
builder.add_node("tools", ToolNode([ping]))
builder.add_edge(START, "model")
builder.add_conditional_edges("model", tools_condition, ["tools", END])
builder.add_edge("tools", "model")

hosted = host(
    builder.compile(), name="ping_langgraph", pool=POOL, tools={"ping": ToolPolicy("safe")}
)
