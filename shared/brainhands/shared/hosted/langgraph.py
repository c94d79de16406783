"""LangGraph graphs hosted by brainhands (the ``langgraph`` extra).

``host(graph, name=..., tools={...})`` takes a compiled graph as its application built it
(a ``StateGraph`` compiled, its tools in ``ToolNode``\\s) and returns the ``HostedAgent`` a
Brain runs (``brainhands.brain.hosted.langgraph``), with a checkpointer of its own in the
session store. The tools of its ``ToolNode``\\s are registered here as brainhands tools,
``<name>.<tool>``, which a Hands serving the module runs: the arguments validated by the
tool as LangChain validates them, its output handed back to the graph as the content of
the call's ``ToolMessage``.

Only the LangGraph versions this integration was written against are accepted
(``SUPPORTED``): another is refused when ``host`` runs, at start-up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from importlib.metadata import version
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt import ToolNode
from pydantic_core import to_jsonable_python

from brainhands.shared.errors import ConfigurationError
from brainhands.shared.hosted import (
    HostedAgent,
    HostedTool,
    ToolPolicy,
    foreign_tool,
    require_version,
    returned,
)
from brainhands.shared.tools import registry

__all__ = ["FRAMEWORK", "SUPPORTED", "host", "tool_nodes"]

FRAMEWORK = "langgraph"
SUPPORTED = ("1.2", "1.3")
"""The LangGraph versions this integration knows: from the first, below the second."""


def tool_nodes(graph: Any) -> Iterator[tuple[str, ToolNode]]:
    """The graph's ``ToolNode``\\s, by node name: their calls go to Hands."""
    for name, node in graph.builder.nodes.items():
        if isinstance(node.runnable, ToolNode):
            yield name, node.runnable


def host(
    graph: Any,
    *,
    name: str,
    pool: str = "default",
    tools: Mapping[str, ToolPolicy] | None = None,
) -> HostedAgent:
    """Host the compiled ``graph`` as the brainhands agent ``name``: the tools of its
    ``ToolNode``\\s run on the Hands pool ``pool`` (or the one ``tools`` gives them), under
    the policies ``tools`` declares by the tool's name (``unsafe`` for the others). Its
    input is ``{"messages": [<the submission's text>]}``; its answer, the content of the
    last message of its final state."""
    require_version("langgraph", version("langgraph"), *SUPPORTED)
    if not hasattr(graph, "builder") or not hasattr(graph, "checkpointer"):
        raise ConfigurationError(f"agent {name!r}: host a compiled graph (graph.compile())")
    declared = dict(tools or {})
    hosted: list[HostedTool] = []
    for _, node in tool_nodes(graph):
        for tool in node.tools_by_name.values():
            policy = declared.pop(tool.name, ToolPolicy())
            full = f"{name}.{tool.name}"
            registry.add(
                foreign_tool(
                    name=full,
                    pool=pool,
                    declared=policy,
                    description=tool.description,
                    schema=convert_to_openai_tool(tool)["function"]["parameters"],
                    call=_caller(tool),
                )
            )
            hosted.append(HostedTool(tool.name, full))
    if declared:
        raise ConfigurationError(f"agent {name!r} has no tools named {sorted(declared)}")
    return HostedAgent(name, FRAMEWORK, graph, tuple(hosted))


def _caller(tool: BaseTool) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    async def call(arguments: dict[str, Any]) -> dict[str, Any]:
        return returned(to_jsonable_python(await tool.ainvoke(arguments)))

    return call
