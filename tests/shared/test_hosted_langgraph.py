"""Hosting a LangGraph graph, as both roles see it: the installed version in the range the
integration knows, each ToolNode tool declared as ``<agent>.<tool>`` with its policy, and
a tool run as a Hands runs it, with the call's operation id."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import pytest
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from brainhands import ToolPolicy, tool_context
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.hosted import ForeignArguments, returned, version_refusal
from brainhands.shared.hosted.langgraph import SUPPORTED, host
from brainhands.shared.tools import registry


@dataclass
class Running:
    """What a Hands hands a tool of the call it runs (``hands.ToolContext``'s face)."""

    operation_id: str
    fence: int = 1
    attempt: int = 1

    async def progress(self, message: str, **data: Any) -> None:
        return None

    def cancelled(self) -> bool:
        return False


@tool
async def look(query: str) -> str:
    """Look something up."""
    return f"{query} ({tool_context().operation_id})"


@tool
async def wire(amount: int) -> str:
    """Wire money."""
    return str(amount)


def graph_of(*tools: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(list(tools)))
    builder.add_edge(START, "tools")
    return builder.compile()


def test_the_installed_langgraph_is_in_the_supported_range() -> None:
    assert version_refusal("langgraph", version("langgraph"), *SUPPORTED) is None
    assert "supports langgraph >=1.2,<1.3" in str(version_refusal("langgraph", "1.3.0", *SUPPORTED))


async def test_host_declares_each_tool_node_tool_with_its_policy_and_runs_it() -> None:
    hosted = host(
        graph_of(look, wire), name="desk", pool="till", tools={"look": ToolPolicy("safe")}
    )

    assert [(t.name, t.declared) for t in hosted.tools] == [
        ("look", "desk.look"),
        ("wire", "desk.wire"),
    ]
    look_spec, wire_spec = registry.get("desk.look"), registry.get("desk.wire")
    assert (look_spec.pool, look_spec.policy, wire_spec.policy) == ("till", "safe", "unsafe")
    assert look_spec.declaration().description == "Look something up."
    assert look_spec.declaration().args_schema["properties"]["query"]["type"] == "string"
    # Run as a Hands runs it: the arguments validated by the tool ("2" becomes 2).
    assert await wire_spec.fn(ForeignArguments(amount="2"), Running("op-1")) == returned("2")
    assert await look_spec.fn(ForeignArguments(query="tea"), Running("op-2")) == returned(
        "tea (op-2)"
    )


def test_host_refuses_what_it_cannot_host() -> None:
    with pytest.raises(ConfigurationError, match=r"no tools named \['mail'\]"):
        host(graph_of(look), name="empty", tools={"mail": ToolPolicy()})
    with pytest.raises(ConfigurationError, match="compiled graph"):
        host(StateGraph(MessagesState), name="raw")
