"""What an OpenAI Agents SDK agent becomes when hosted (``shared.hosted.openai_agents``): the
tools ``host`` declares, across the agents it hands off to, what it refuses, and a hosted
tool run as a Hands runs it."""

from __future__ import annotations

from typing import Any

import agents
import pytest
from agents import Agent, RunContextWrapper, WebSearchTool, function_tool, handoff
from agents.tracing import get_trace_provider

from brainhands.shared.errors import ConfigurationError
from brainhands.shared.hosted import (
    ForeignArguments,
    ToolPolicy,
    returned,
    tool_context,
    version_refusal,
)
from brainhands.shared.hosted.openai_agents import SUPPORTED, agents_of, host
from brainhands.shared.tools import registry
from tests.helpers.hosted_runs import Running

pytestmark = pytest.mark.usefixtures("own_registry")


@function_tool
async def look(query: str) -> str:
    """Look something up."""
    return query


@function_tool(needs_approval=True)
async def wire(amount: int) -> str:
    return str(amount)


def test_the_installed_sdk_is_in_the_supported_range() -> None:
    assert version_refusal("openai-agents", agents.__version__, *SUPPORTED) is None
    assert version_refusal("openai-agents", "0.25.0", *SUPPORTED) is not None


def test_host_declares_the_tools_of_every_agent_it_hands_off_to_unsafe_by_default() -> None:
    back = Agent(name="back", tools=[wire])
    front = Agent(name="front", tools=[look], handoffs=[back])
    back.handoffs = [front]  # a cycle: each agent counted once

    hosted = host(front, name="shop", pool="till", tools={"look": ToolPolicy(policy="safe")})

    assert [a.name for a in agents_of(front)] == ["front", "back"]
    assert [(t.name, t.declared, t.approval) for t in hosted.tools] == [
        ("look", "shop.look", False),
        ("wire", "shop.wire", True),
    ]
    look_spec, wire_spec = registry.get("shop.look"), registry.get("shop.wire")
    assert (look_spec.pool, look_spec.policy, look_spec.approval) == ("till", "safe", False)
    assert (wire_spec.pool, wire_spec.policy, wire_spec.approval) == ("till", "unsafe", True)
    assert look_spec.declaration().description == "Look something up."
    assert look_spec.declaration().args_schema["properties"]["query"]["type"] == "string"
    # The SDK never exports traces on its own account.
    assert get_trace_provider()._disabled  # type: ignore[attr-defined]


def test_host_refuses_what_it_cannot_host_with_the_reason() -> None:
    with pytest.raises(ConfigurationError, match=r"no tools named \['mail'\]"):
        host(Agent(name="empty"), name="empty", tools={"mail": ToolPolicy()})
    with pytest.raises(ConfigurationError, match="not a Handoff"):
        host(Agent(name="a", handoffs=[handoff(Agent(name="b"))]), name="a")
    with pytest.raises(ConfigurationError, match="only function tools"):
        host(Agent(name="web", tools=[WebSearchTool()]), name="web")
    twin = Agent(name="twin", tools=[look])
    with pytest.raises(ConfigurationError, match="two of its agents have a tool named 'look'"):
        host(Agent(name="one", tools=[look], handoffs=[twin]), name="one")


async def test_a_hosted_tool_runs_with_its_context_and_its_operation_id() -> None:
    @function_tool
    async def greet(ctx: RunContextWrapper[str], name: str, times: int = 1) -> str:
        return f"{ctx.context} {name} x{times} ({tool_context().operation_id})"

    host(Agent(name="greeter", tools=[greet]), name="greeter", deps=lambda: "hello")
    run = registry.get("greeter.greet").fn

    said = await run(ForeignArguments(name="ann", times=2), Running("op-1"))
    assert said == returned("hello ann x2 (op-1)")
    # Arguments the SDK cannot read: its own error, for the model to read.
    bad: Any = await run(ForeignArguments(times="many"), Running("op-2"))
    assert "error" in bad["returned"].lower()
