"""What an AgentScope agent becomes when hosted (``shared.hosted.agentscope``): the tools
``host`` declares, what it refuses, the versions it accepts, and a hosted tool run as a
Hands runs it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import agentscope
import pytest
from agentscope.agent import Agent, ContextConfig
from agentscope.message import TextBlock, ToolResultState
from agentscope.tool import FunctionTool, ToolChunk, ToolGroup, Toolkit

from brainhands.shared.errors import ConfigurationError
from brainhands.shared.hosted import ForeignArguments, ToolPolicy, returned, tool_context
from brainhands.shared.hosted.agentscope import SUPPORTED, host
from brainhands.shared.tools import QueryAnswer, ToolContextLike, registry
from tests.helpers.hosted_as_agent import ScriptModel
from tests.helpers.hosted_runs import Running

pytestmark = pytest.mark.usefixtures("own_registry")


async def look(query: str) -> str:
    """Look something up.

    Args:
        query (`str`): what to look up.
    """
    return f"{query} ({tool_context().operation_id})"


async def wire(amount: int) -> str:
    """Wire money.

    Args:
        amount (`int`): how much.
    """
    return str(amount)


def agent(
    tools: list[Any] | None = None, groups: list[ToolGroup] | None = None, **more: Any
) -> Agent:
    toolkit = Toolkit(tools=tools, tool_groups=groups)
    return Agent(name="shop", system_prompt="Sell.", model=ScriptModel(), toolkit=toolkit, **more)


def test_the_installed_agentscope_is_accepted_and_another_version_refused_at_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host(agent(), name="shop")
    monkeypatch.setattr(agentscope, "__version__", "2.1.0")
    with pytest.raises(ConfigurationError) as refused:
        host(agent(), name="shop")
    assert str(refused.value) == (
        "agentscope 2.1.0 is installed, but brainhands supports agentscope >=2.0.11,<2.1: "
        "install a version in that range"
    )
    assert SUPPORTED == ("2.0.11", "2.1")


def test_host_declares_the_tools_of_every_group_unsafe_by_default_with_no_approval() -> None:
    orders = ToolGroup("orders", description="Orders.", tools=[FunctionTool(wire)])
    shop = agent([FunctionTool(look)], groups=[orders])

    hosted = host(shop, name="shop", pool="till", tools={"look": ToolPolicy(policy="safe")})

    assert [(t.name, t.declared, t.approval) for t in hosted.tools] == [
        ("look", "shop.look", False),
        ("wire", "shop.wire", False),
    ]
    look_spec, wire_spec = registry.get("shop.look"), registry.get("shop.wire")
    # Whether a call needs approval is AgentScope's permission engine's, call by call.
    assert (look_spec.pool, look_spec.policy, look_spec.approval) == ("till", "safe", False)
    assert (wire_spec.pool, wire_spec.policy, wire_spec.approval) == ("till", "unsafe", False)
    assert look_spec.declaration().description.startswith("Look something up.")
    assert look_spec.declaration().args_schema["properties"]["query"]["type"] == "string"


def test_host_refuses_what_it_cannot_host_with_the_reason() -> None:
    with pytest.raises(ConfigurationError, match=r"no tools named \['mail'\]"):
        host(agent(), name="shop", tools={"mail": ToolPolicy()})
    with pytest.raises(ConfigurationError, match="reads the agent's state"):
        host(agent([FunctionTool(look, is_state_injected=True)]), name="shop")
    with pytest.raises(ConfigurationError, match="compression tool is not hosted"):
        host(agent(context_config=ContextConfig(compression_tool_enabled=True)), name="shop")
    twin = ToolGroup("more", description="More.", tools=[FunctionTool(look)])
    with pytest.raises(ConfigurationError, match="two of its tools are named 'look'"):
        host(agent([FunctionTool(look)], groups=[twin]), name="shop")


async def test_a_hosted_tool_runs_with_its_operation_id_its_chunks_gathered() -> None:
    async def count(upto: int) -> AsyncIterator[ToolChunk]:
        """Count.

        Args:
            upto (`int`): where to stop.
        """
        block = TextBlock(text="")
        for n in range(upto):
            yield ToolChunk(content=[TextBlock(id=block.id, text=str(n))])
        yield ToolChunk(content=[], state=ToolResultState.ERROR, metadata={"why": "tired"})

    host(agent([FunctionTool(look), FunctionTool(count)]), name="shop")

    looked = await registry.get("shop.look").fn(ForeignArguments(query="tea"), Running("op-1"))
    counted = await registry.get("shop.count").fn(ForeignArguments(upto=3), Running("op-2"))

    [said] = looked["returned"]["output"]
    assert (said["text"], looked["returned"]["state"]) == ("tea (op-1)", "success")
    # A stream is gathered as AgentScope gathers it; an error chunk is the tool's answer.
    [gathered] = counted["returned"]["output"]
    assert gathered["text"] == "012"
    assert (counted["returned"]["state"], counted["returned"]["metadata"]) == (
        "error",
        {"why": "tired"},
    )
    assert looked == returned(looked["returned"])


async def test_a_query_answer_is_made_the_response_the_tool_would_have_given() -> None:
    async def asked(arguments: dict[str, Any], ctx: ToolContextLike) -> QueryAnswer:
        happened = ctx.operation_id == "op-1"
        return QueryAnswer(happened, {"found": arguments["query"]} if happened else None)

    policy = ToolPolicy(policy="query", query=asked)
    host(agent([FunctionTool(look)]), name="shop", tools={"look": policy})
    query = registry.get("shop.look").query
    assert query is not None

    happened = await query(ForeignArguments(query="tea"), Running("op-1"))
    missing = await query(ForeignArguments(query="tea"), Running("op-2"))

    # As AgentScope makes a function's return value a result: JSON text, for the model.
    assert happened.happened
    [said] = happened.result["returned"]["output"]
    assert (said["text"], happened.result["returned"]["state"]) == ('{"found": "tea"}', "success")
    assert (missing.happened, missing.result) == (False, returned(None))
