"""AgentScope agents hosted by brainhands (the ``agentscope`` extra).

``host(agent, name=..., tools={...})`` takes an ``agentscope.agent.Agent`` (the ReAct agent)
as its application built it (system prompt, model, a ``Toolkit`` of function tools in its
groups, its configurations, its permission context) and returns the ``HostedAgent`` a Brain
runs (``brainhands.brain.hosted.agentscope``). The toolkit's function tools are registered
here as brainhands tools, ``<name>.<tool>``, which a Hands serving the module runs: the
tool itself called with the arguments the Brain parsed as AgentScope parses them, its
middlewares around it, its chunks gathered into the ``ToolResponse`` AgentScope would keep.
A tool's own error result (a chunk in the ``error`` state) is an answer for the model; an
exception it raises is brainhands' to judge, under the tool's replay policy. A ``query``
tool's query answers with what the tool's function would have returned, which is made the
response AgentScope would have made of it.

Whether a call needs a person's approval is AgentScope's to say, call by call (its
permission engine, in the Brain): none is declared here.

Only the AgentScope versions this integration was written against are accepted
(``SUPPORTED``): another is refused when ``host`` runs, at start-up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import agentscope
from agentscope.agent import Agent
from agentscope.tool import FunctionTool, ToolChunk, ToolResponse
from pydantic import BaseModel

from brainhands.shared.errors import ConfigurationError
from brainhands.shared.hosted import (
    ForeignQuery,
    HostedAgent,
    HostedTool,
    ToolPolicy,
    foreign_tool,
    require_version,
    returned,
)
from brainhands.shared.tools import QueryAnswer, ToolContextLike, registry

__all__ = ["FRAMEWORK", "SUPPORTED", "function_tools", "host"]

FRAMEWORK = "agentscope"
SUPPORTED = ("2.0.11", "2.1")
"""The AgentScope versions this integration knows: from the first, below the second."""


def function_tools(agent: Agent) -> list[FunctionTool]:
    """The function tools of every group of ``agent``'s toolkit, refusing what a Hands
    cannot run for it."""
    found: list[FunctionTool] = []
    if agent.context_config.compression_tool_enabled:
        raise ConfigurationError(
            f"agent {agent.name!r}: the context compression tool is not hosted "
            "(compression_tool_enabled=False; automatic compression is)"
        )
    for group in agent.toolkit.tool_groups:
        if group.mcps:
            raise ConfigurationError(
                f"agent {agent.name!r}: MCP clients are not hosted (group {group.name!r}); "
                "serve their servers from a Hands with BRAINHANDS_MCP_CONFIG instead"
            )
        for tool in group.tools:
            if not isinstance(tool, FunctionTool):
                raise ConfigurationError(
                    f"agent {agent.name!r}: only function tools can be hosted, "
                    f"not {type(tool).__name__} ({tool.name!r})"
                )
            if tool.is_state_injected:
                raise ConfigurationError(
                    f"agent {agent.name!r}: the tool {tool.name!r} reads the agent's state, "
                    "which a Hands does not have (is_state_injected=True)"
                )
            found.append(tool)
    return found


def host(
    agent: Agent,
    *,
    name: str,
    pool: str = "default",
    tools: Mapping[str, ToolPolicy] | None = None,
    output: type[BaseModel] | None = None,
) -> HostedAgent:
    """Host ``agent`` as the brainhands agent ``name``; its tools run on the Hands pool
    ``pool`` (or the one ``tools`` gives them), under the policies ``tools`` declares by the
    tool's name (``unsafe`` for the others). ``output`` is the structured output its reply
    must give (AgentScope's ``structured_schema``): the session is answered with it, as
    AgentScope validated it; without it, with the reply's text."""
    require_version("agentscope", agentscope.__version__, *SUPPORTED)
    declared = dict(tools or {})
    hosted: dict[str, HostedTool] = {}
    for tool in function_tools(agent):
        if tool.name in hosted:
            raise ConfigurationError(f"agent {name!r}: two of its tools are named {tool.name!r}")
        policy = declared.pop(tool.name, ToolPolicy())
        if policy.query is not None:
            policy = dataclasses.replace(policy, query=_asking(policy.query))
        full = f"{name}.{tool.name}"
        registry.add(
            foreign_tool(
                name=full,
                pool=pool,
                declared=policy,
                description=tool.description,
                schema=tool.input_schema,
                call=_caller(tool),
            )
        )
        hosted[tool.name] = HostedTool(tool.name, full)
    if declared:
        raise ConfigurationError(f"agent {name!r} has no tools named {sorted(declared)}")
    return HostedAgent(name, FRAMEWORK, agent, tuple(hosted.values()), output=output)


def _caller(tool: FunctionTool) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    async def call(arguments: dict[str, Any]) -> dict[str, Any]:
        return returned(await gathered(await tool(**arguments)))

    return call


def _asking(query: ForeignQuery) -> ForeignQuery:
    """``query``, its answer's result (what the tool's function would have returned) made
    the response AgentScope would have made of it."""

    async def ask(arguments: dict[str, Any], ctx: ToolContextLike) -> QueryAnswer:
        answer = await query(arguments, ctx)
        if not answer.happened:
            return answer
        chunk = FunctionTool._convert_func_result_to_chunk(answer.result)
        return QueryAnswer(True, await gathered(chunk))

    return ask


async def gathered(result: ToolChunk | AsyncIterator[ToolChunk]) -> dict[str, Any]:
    """A tool's chunks gathered as AgentScope gathers them (``ToolResponse``), as JSON."""
    response = ToolResponse()
    if isinstance(result, ToolChunk):
        response.append_chunk(result)
    else:
        async for chunk in result:
            response.append_chunk(chunk)
    return {
        "output": [block.model_dump(mode="json") for block in response.content],
        "state": str(response.state),
        "metadata": response.metadata,
    }
