"""The driver of hosted LangGraph graphs (``brainhands.shared.hosted.langgraph``).

A graph is hosted with its recovery nodes, not replayed: each pass resumes the run from
its last committed checkpoint (``brain.hosted.checkpoints``), and runs super-steps one at a
time, of which one at most runs the graph's own nodes (the pass's commit keeps their
checkpoints), or stops where a ``ToolNode`` reaches calls with no journaled outcome. The
nodes that are not tool calls (a model node, say) run in the Brain, as LangGraph runs them;
what they did is durable once the checkpoint of their super-step is committed, and a Brain
killed before that runs them again from the checkpoint before, as LangGraph's own recovery
does. A ``ToolNode``'s step runs no code of the graph's (its calls are answered from the
journal, or wanted), so the pass goes on through it: the step that applies the outcomes
and the model's step after it are one pass, and so are the model's step and the calls it
asks for, as a native agent's turn is.

A ``ToolNode``'s calls are intercepted (its ``awrap_tool_call``): a call whose outcome is
journaled (a ``tool_result`` entry, by the model's call id) is answered with it, as the
``ToolMessage`` the graph reads (an uncertain, failed or refused call as an error status);
a call with none is wanted, and the step stops (``ToolsWanted``, which LangGraph lets
through as it lets an interrupt through, saving nothing of the step). The wanted calls
become durable calls in the commit of the pass, with the checkpoints that led to them.

An ``interrupt()`` pauses the graph as LangGraph pauses it (its checkpoint committed with
the pass); each pending interrupt becomes a brainhands approval (its value what a person
decides on, listed and decided as any approval is, exactly once), and the graph resumes
with the decision, ``{"approved": bool, "reason": ...}``, as ``interrupt()``'s return.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, Interrupt
from pydantic_core import to_jsonable_python

from brainhands.brain.hosted.checkpoints import SessionSaver
from brainhands.brain.hosted.driver import Answered, Stepped, Stop, WantsTools
from brainhands.brain.hosted.journal import Journal, ToolRequest
from brainhands.shared.hosted import HostedAgent, read_reply
from brainhands.shared.hosted.langgraph import tool_nodes

THREAD = "run"
"""The one thread of a run: a submission's graph run is a run of its own."""

_journal: ContextVar[Journal] = ContextVar("langgraph_journal")


class ToolsWanted(GraphBubbleUp):
    """A ``ToolNode`` reached calls whose outcomes are not journaled yet."""


def tool_message(call: dict[str, Any], outcome: dict[str, Any]) -> ToolMessage:
    """What the graph reads of a call's journaled outcome."""
    if outcome["status"] != "succeeded":
        said = json.dumps({"status": outcome["status"], "error": outcome.get("error")})
        return ToolMessage(said, tool_call_id=call["id"], name=call["name"], status="error")
    value = read_reply(outcome["result"]).value
    content = value if isinstance(value, str) else json.dumps(value)
    return ToolMessage(content, tool_call_id=call["id"], name=call["name"])


def decisions(paused: Sequence[Interrupt], journal: Journal) -> dict[str, Any]:
    """What each ``interrupt()`` of the graph returns as it resumes: the decision of its
    approval (``{"approved": ..., "reason": ...}``), by interrupt id."""
    resumed: dict[str, Any] = {}
    for interrupt in paused:
        outcome = journal.outcomes[interrupt.id]
        approved = outcome["status"] == "succeeded"
        resumed[interrupt.id] = {"approved": approved, "reason": outcome.get("error")}
    return resumed


class LangGraphDriver:
    """Runs one hosted graph (``brain.hosted.driver.Driver``)."""

    def __init__(self, hosted: HostedAgent) -> None:
        self.hosted = hosted
        self.graph = hosted.agent
        self.tool_nodes: set[str] = set()
        for name, node in tool_nodes(self.graph):
            node._awrap_tool_call = self._journaled
            self.tool_nodes.add(name)

    async def _journaled(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage:
        journal = _journal.get()
        call: dict[str, Any] = dict(request.tool_call)
        outcome = journal.outcomes.get(call["id"])
        if outcome is not None:
            return tool_message(call, outcome)
        hosted = self.hosted.tool(call["name"])
        assert hosted is not None, f"{call['name']!r} is a tool of the hosted graph"
        arguments = to_jsonable_python(call["args"])
        journal.wanted.append(ToolRequest(call["id"], hosted.declared, arguments, False))
        # No await before this raise: every call of the step gets here in the same turn of
        # the loop, so all of them are wanted together.
        raise ToolsWanted

    def _tools_only(self, nodes: Sequence[str]) -> bool:
        """Whether a super-step of ``nodes`` runs ``ToolNode``\\s alone: its calls are
        answered from the journal or wanted, so it runs no code of the graph's that a
        pass must commit before going on."""
        return bool(nodes) and set(nodes) <= self.tool_nodes

    def _decision(self, interrupt: Interrupt) -> ToolRequest:
        """The approval an ``interrupt()`` waits for: its value is what a person decides on."""
        value = {"value": to_jsonable_python(interrupt.value)}
        return ToolRequest(
            interrupt.id, f"{self.hosted.name}.interrupt", value, approval=True, resume=True
        )

    async def run(self, prompt: str, journal: Journal) -> Stop:
        saver = SessionSaver(journal, THREAD)
        graph = self.graph.copy(update={"checkpointer": saver})
        config: RunnableConfig = {"configurable": {"thread_id": THREAD}}
        start: Any = {"messages": [HumanMessage(prompt)]}
        upcoming: Sequence[str] = ()  # the next super-step's nodes (the first's: unknown)
        if saver.order:
            resumed = await graph.aget_state(config)
            paused, upcoming = resumed.interrupts, resumed.next
            start = Command(resume=decisions(paused, journal)) if paused else None
        ran_nodes = False
        token = _journal.set(journal)
        try:
            while True:
                if not self._tools_only(upcoming):
                    if ran_nodes:
                        return Stepped()
                    ran_nodes = True
                # One super-step at a time (the run's input and start, bookkeeping, go
                # with the first node's step), so that the pass stops where it must.
                await graph.ainvoke(start, config, interrupt_after="*")
                state = await graph.aget_state(config)
                if state.interrupts:
                    return WantsTools(tuple(self._decision(i) for i in state.interrupts))
                if not state.next:
                    break
                start, upcoming = None, state.next
        except ToolsWanted:
            return WantsTools(tuple(journal.wanted))
        finally:
            _journal.reset(token)
        messages: list[BaseMessage] = state.values.get("messages", [])
        if not messages:
            return Answered(to_jsonable_python(state.values))
        return Answered(to_jsonable_python(messages[-1].content))
