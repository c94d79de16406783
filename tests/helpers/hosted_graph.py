"""A LangGraph graph hosted by brainhands, for the tests (``--agents`` of a Brain and
``--tools`` of a Hands, both with ``HOSTED_LEDGERS``, a folder).

A ReAct graph: a model node and a ``ToolNode`` of two tools, each writing to a ledger of
its own (``tests.helpers.ledgers``), one row per effect under the call's operation id:
``record`` (``query``: its query looks the id up) and ``transfer`` (``unsafe``).

Its model is a small chat model of its own that plays the script named by the prompt, one
step per answer: tool calls, then the answer, a JSON object whose ``seen`` lists the tool
messages the graph was handed back, in order. Every time the model node runs it appends
the messages it was sent to ``requests.jsonl``: a node run again after a kill shows there.
For the ``approve`` script it first asks a person (``interrupt()``): denied, it answers
with the refusal.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

from brainhands import ToolPolicy
from brainhands.shared.hosted.langgraph import host
from tests.helpers import ledgers
from tests.helpers.ledgers import make_effect, recorded

SCRIPTS: dict[str, list[Any]] = {
    "plain": [[("record", {"item": "apple"}), ("transfer", {"amount": 5})], "answer"],
    "chaos": [[("transfer", {"amount": 5})], [("record", {"item": "apple"})], "answer"],
    "approve": [[("transfer", {"amount": 7})], "answer"],
}
ASKS = {"approve": {"transfer": 7}}
"""The scripts whose model node asks a person first (``interrupt()``), and what it asks."""


class ScriptedModel(BaseChatModel):
    """Answers by the script its first message names, one step per answer so far."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        prompt = str(messages[0].content)
        answered = sum(isinstance(m, AIMessage) for m in messages)
        step = SCRIPTS[prompt][answered]
        if isinstance(step, list):
            calls = [
                {"name": name, "args": args, "id": f"call-{answered}-{n}", "type": "tool_call"}
                for n, (name, args) in enumerate(step)
            ]
            message = AIMessage("", tool_calls=calls)
        else:
            seen = [
                f"{m.name}: {m.content}" + (" (error)" if m.status == "error" else "")
                for m in messages
                if isinstance(m, ToolMessage)
            ]
            message = AIMessage(json.dumps({"summary": prompt, "seen": seen}))
        return ChatResult(generations=[ChatGeneration(message=message)])


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


model = ScriptedModel()


def log_request(messages: list[BaseMessage]) -> None:
    with open(ledgers.LEDGERS / "requests.jsonl", "a") as log:
        log.write(json.dumps([[m.type, m.content] for m in messages]) + "\n")


async def think(state: State) -> dict[str, Any]:
    prompt = str(state["messages"][0].content)
    if prompt in ASKS and not any(isinstance(m, AIMessage) for m in state["messages"]):
        decision = interrupt(ASKS[prompt])
        if not decision["approved"]:
            said = {"summary": prompt, "seen": [f"denied: {decision['reason']}"]}
            return {"messages": [AIMessage(json.dumps(said))]}
    log_request(state["messages"])
    return {"messages": [await model.ainvoke(state["messages"])]}


@tool
async def record(item: str) -> str:
    """Record an item in the books."""
    make_effect("record", item)
    return f"recorded {item}"


@tool
async def transfer(amount: int) -> str:
    """Move money."""
    make_effect("transfer", str(amount))
    return f"transferred {amount}"


builder = StateGraph(State)
builder.add_node("model", think)
builder.add_node("tools", ToolNode([record, transfer]))
builder.add_edge(START, "model")
builder.add_conditional_edges("model", tools_condition, ["tools", END])
builder.add_edge("tools", "model")
graph = builder.compile()

hosted = host(
    graph,
    name="ledger",
    pool="ledger",
    tools={"record": ToolPolicy(policy="query", query=recorded)},
)
