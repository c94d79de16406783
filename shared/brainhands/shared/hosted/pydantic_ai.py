"""Pydantic AI agents hosted by brainhands (the ``pydantic-ai`` extra).

``host(agent, name=..., tools={...})`` takes a ``pydantic_ai.Agent`` as its application
built it (instructions, function tools and ``FunctionToolset`` toolsets, output type, model)
and returns the ``HostedAgent`` a Brain runs (``brainhands.brain.hosted.pydantic_ai``). Its
function tools are registered here as brainhands tools, ``<name>.<tool>``, which a Hands
serving the module runs: the arguments validated as Pydantic AI validates them, the
function called with a ``RunContext`` of its own (its ``deps`` made by the ``deps`` given to
``host``, in the Hands' process), a ``ModelRetry`` handed back for the model to read.

Only the Pydantic AI versions this integration was written against are accepted
(``SUPPORTED``): another is refused when ``host`` runs, at start-up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pydantic_ai
from pydantic_ai import ModelRetry, RunContext
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RunUsage
from pydantic_core import to_jsonable_python

from brainhands.shared.errors import ConfigurationError
from brainhands.shared.hosted import (
    HostedAgent,
    HostedTool,
    ToolPolicy,
    foreign_tool,
    require_version,
    retry_asked,
    returned,
)
from brainhands.shared.tools import registry

__all__ = ["FRAMEWORK", "SUPPORTED", "host"]

FRAMEWORK = "pydantic_ai"
SUPPORTED = ("2.78", "3")
"""The Pydantic AI versions this integration knows: from the first, below the second."""


def host(
    agent: pydantic_ai.Agent[Any, Any],
    *,
    name: str,
    pool: str = "default",
    tools: Mapping[str, ToolPolicy] | None = None,
    deps: Callable[[], Any] | None = None,
) -> HostedAgent:
    """Host ``agent`` as the brainhands agent ``name``; its tools run on the Hands pool
    ``pool`` (or the one ``tools`` gives them), under the policies ``tools`` declares by
    the tool's name (``unsafe`` for the others). ``deps`` makes the agent's dependencies,
    where they are needed: at each pass of a Brain (instructions, validators) and for each
    tool call on a Hands, from what that process has (a client, a connection pool)."""
    require_version("pydantic-ai", pydantic_ai.__version__, *SUPPORTED)
    declared = dict(tools or {})
    hosted: list[HostedTool] = []
    for toolset in agent.toolsets:
        if not isinstance(toolset, FunctionToolset):
            raise ConfigurationError(
                f"agent {name!r}: only function tools and FunctionToolsets can be hosted, "
                f"not {type(toolset).__name__}"
            )
        for tool in toolset.tools.values():
            policy = declared.pop(tool.name, ToolPolicy())
            full = f"{name}.{tool.name}"
            registry.add(
                foreign_tool(
                    name=full,
                    pool=pool,
                    declared=policy,
                    description=tool.description or "",
                    schema=tool.function_schema.json_schema,
                    call=_caller(toolset, tool.name, deps),
                    approval=bool(tool.requires_approval),
                )
            )
            hosted.append(HostedTool(tool.name, full, bool(tool.requires_approval)))
    if declared:
        raise ConfigurationError(f"agent {name!r} has no tools named {sorted(declared)}")
    return HostedAgent(name, FRAMEWORK, agent, tuple(hosted), deps)


def _caller(
    toolset: FunctionToolset[Any], name: str, deps: Callable[[], Any] | None
) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    async def call(arguments: dict[str, Any]) -> dict[str, Any]:
        ctx = RunContext[Any](
            deps=deps() if deps is not None else None,
            model=None,  # type: ignore[arg-type]  # a tool runs apart from any model
            usage=RunUsage(),
            tool_name=name,
        )
        tool = (await toolset.get_tools(ctx))[name]
        try:
            valid = tool.args_validator.validate_python(arguments)
            value = await toolset.call_tool(name, valid, ctx, tool)
        except ModelRetry as exc:
            return retry_asked(exc.message)
        return returned(to_jsonable_python(value))

    return call
