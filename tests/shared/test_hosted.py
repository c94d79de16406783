"""What both roles know of hosted agents: the version range a framework is accepted in,
the envelope of a hosted tool's reply, and the tools ``host`` declares."""

from __future__ import annotations

import pydantic_ai
import pytest
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.models.test import TestModel

from brainhands.shared.errors import ConfigurationError
from brainhands.shared.hosted import (
    ForeignArguments,
    Reply,
    ToolPolicy,
    read_reply,
    require_version,
    retry_asked,
    returned,
    tool_context,
    version_refusal,
)
from brainhands.shared.hosted.pydantic_ai import SUPPORTED, host
from brainhands.shared.tools import registry
from tests.helpers.hosted_runs import Running

pytestmark = pytest.mark.usefixtures("own_registry")


@pytest.mark.parametrize("installed", ["2.78.0", "2.78", "2.99.1", "2.100.0rc1"])
def test_a_version_in_the_range_is_accepted(installed: str) -> None:
    assert version_refusal("pydantic-ai", installed, "2.78", "3") is None


@pytest.mark.parametrize("installed", ["2.77.9", "1.0.0", "3.0.0", "3.0.0a1", "10.1"])
def test_a_version_outside_the_range_is_refused_with_the_range(installed: str) -> None:
    refusal = version_refusal("pydantic-ai", installed, "2.78", "3")
    assert refusal == (
        f"pydantic-ai {installed} is installed, but brainhands supports pydantic-ai "
        ">=2.78,<3: install a version in that range"
    )
    with pytest.raises(ConfigurationError, match=r">=2\.78,<3"):
        require_version("pydantic-ai", installed, "2.78", "3")


def test_the_installed_pydantic_ai_is_in_the_supported_range() -> None:
    assert version_refusal("pydantic-ai", pydantic_ai.__version__, *SUPPORTED) is None


def test_a_reply_tells_a_return_from_a_retry() -> None:
    assert read_reply(returned({"a": 1})) == Reply("returned", {"a": 1})
    assert read_reply(returned(None)) == Reply("returned", None)
    assert read_reply(retry_asked("name the item")) == Reply("retry", "name the item")
    with pytest.raises(ValueError, match="not a hosted tool's reply"):
        read_reply({"retry": "x", "returned": 1})


def test_host_declares_each_tool_with_its_policy_unsafe_by_default() -> None:
    agent = Agent(TestModel())

    @agent.tool_plain
    async def look(query: str) -> str:
        """Look something up."""
        return query

    @agent.tool_plain(requires_approval=True)
    async def wire(amount: int) -> str:
        return str(amount)

    hosted = host(agent, name="shop", pool="till", tools={"look": ToolPolicy(policy="safe")})

    assert [(t.name, t.declared, t.approval) for t in hosted.tools] == [
        ("look", "shop.look", False),
        ("wire", "shop.wire", True),
    ]
    look_spec, wire_spec = registry.get("shop.look"), registry.get("shop.wire")
    assert (look_spec.pool, look_spec.policy, look_spec.approval) == ("till", "safe", False)
    assert (wire_spec.pool, wire_spec.policy, wire_spec.approval) == ("till", "unsafe", True)
    assert look_spec.declaration().description == "Look something up."
    assert look_spec.declaration().args_schema["properties"] == {"query": {"type": "string"}}


def test_host_refuses_a_policy_for_a_tool_the_agent_does_not_have() -> None:
    with pytest.raises(ConfigurationError, match=r"no tools named \['mail'\]"):
        host(Agent(TestModel()), name="empty", tools={"mail": ToolPolicy()})


async def test_a_hosted_tool_runs_with_its_deps_and_its_operation_id_and_can_ask_a_retry() -> None:
    agent = Agent(TestModel(), deps_type=str)

    @agent.tool
    async def greet(ctx: RunContext[str], name: str, times: int = 1) -> str:
        if not name:
            raise ModelRetry("whom should I greet?")
        return f"{ctx.deps} {name} x{times} ({tool_context().operation_id})"

    host(agent, name="greeter", deps=lambda: "hello")
    run = registry.get("greeter.greet").fn

    # The arguments validated as Pydantic AI validates them ("2" becomes 2).
    said = await run(ForeignArguments(name="ann", times="2"), Running("op-1"))
    assert said == returned("hello ann x2 (op-1)")
    assert await run(ForeignArguments(name=""), Running("op-2")) == retry_asked(
        "whom should I greet?"
    )
