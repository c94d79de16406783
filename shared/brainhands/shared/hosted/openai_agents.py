"""OpenAI Agents SDK agents hosted by brainhands (the ``openai-agents`` extra).

``host(agent, name=..., tools={...})`` takes an ``agents.Agent`` as its application built it
(instructions, function tools, handoffs to other agents, output type, guardrails, model) and
returns the ``HostedAgent`` a Brain runs (``brainhands.brain.hosted.openai_agents``). The
function tools of the agent and of every agent it can hand off to are registered here as
brainhands tools, ``<name>.<tool>``, which a Hands serving the module runs: the tool's own
``on_invoke_tool`` called with the arguments as the model sent them, in a ``ToolContext`` of
its own (its ``context`` made by the ``deps`` given to ``host``, in the Hands' process).

The SDK never reaches the network on its own account: its trace export is turned off here.
Only the SDK versions this integration was written against are accepted (``SUPPORTED``):
another is refused when ``host`` runs, at start-up.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import agents
from agents import Agent, FunctionTool, set_tracing_disabled
from agents.tool_context import ToolContext
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

__all__ = ["FRAMEWORK", "SUPPORTED", "agents_of", "host"]

FRAMEWORK = "openai_agents"
SUPPORTED = ("0.24", "0.25")
"""The OpenAI Agents SDK versions this integration knows: from the first, below the second."""


def agents_of(agent: Agent[Any]) -> Iterator[Agent[Any]]:
    """``agent`` and every agent it can hand off to, directly or not, each once."""
    seen: set[int] = set()
    todo = [agent]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for target in current.handoffs:
            if not isinstance(target, Agent):
                raise ConfigurationError(
                    f"agent {current.name!r}: a handoff is hosted when it names its Agent "
                    f"(handoffs=[other_agent]), not a {type(target).__name__}"
                )
            todo.append(target)


def host(
    agent: Agent[Any],
    *,
    name: str,
    pool: str = "default",
    tools: Mapping[str, ToolPolicy] | None = None,
    deps: Callable[[], Any] | None = None,
) -> HostedAgent:
    """Host ``agent`` (and the agents it hands off to) as the brainhands agent ``name``; its
    tools run on the Hands pool ``pool`` (or the one ``tools`` gives them), under the
    policies ``tools`` declares by the tool's name (``unsafe`` for the others). ``deps``
    makes the run's context (the SDK's ``context``), in each process that needs it."""
    require_version("openai-agents", agents.__version__, *SUPPORTED)
    set_tracing_disabled(True)
    declared = dict(tools or {})
    hosted: dict[str, HostedTool] = {}
    for member in agents_of(agent):
        for tool in member.tools:
            if not isinstance(tool, FunctionTool):
                raise ConfigurationError(
                    f"agent {member.name!r}: only function tools can be hosted, "
                    f"not {type(tool).__name__}"
                )
            if tool.name in hosted:
                raise ConfigurationError(
                    f"agent {name!r}: two of its agents have a tool named {tool.name!r}"
                )
            approval = tool.needs_approval is not False
            policy = declared.pop(tool.name, ToolPolicy())
            full = f"{name}.{tool.name}"
            registry.add(
                foreign_tool(
                    name=full,
                    pool=pool,
                    declared=policy,
                    description=tool.description,
                    schema=tool.params_json_schema,
                    call=_caller(tool, deps),
                    approval=approval,
                )
            )
            hosted[tool.name] = HostedTool(tool.name, full, approval)
    if declared:
        raise ConfigurationError(f"agent {name!r} has no tools named {sorted(declared)}")
    return HostedAgent(name, FRAMEWORK, agent, tuple(hosted.values()), deps)


def _caller(
    tool: FunctionTool, deps: Callable[[], Any] | None
) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    async def call(arguments: dict[str, Any]) -> dict[str, Any]:
        text = json.dumps(arguments)
        ctx = ToolContext[Any](
            deps() if deps is not None else None,
            tool_name=tool.name,
            tool_call_id="",  # the brainhands call's own id is tool_context().operation_id
            tool_arguments=text,
        )
        return returned(to_jsonable_python(await tool.on_invoke_tool(ctx, text)))

    return call
