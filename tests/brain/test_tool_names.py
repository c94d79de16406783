"""Tool names as a model is shown them and as it calls them (pure)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from brainhands.brain.agent import Agent, TaskTool
from brainhands.brain.models.base import ToolCall
from brainhands.shared.tools import function_schema, wire_name


class NoArgs(BaseModel):
    pass


def test_a_name_a_model_api_refuses_is_spelled_with_underscores() -> None:
    assert wire_name("send_email") == "send_email"
    assert wire_name("search-web") == "search-web"
    assert wire_name("bank.deposit") == "bank_deposit"
    assert wire_name("files/read v2") == "files_read_v2"
    schema = function_schema("bank.deposit", "Deposit.", {"type": "object"})
    assert schema["function"]["name"] == "bank_deposit"


def test_a_call_by_the_wire_name_maps_back_to_the_tool() -> None:
    agent = Agent(
        name="banker",
        system="",
        tools=("bank.deposit", "send_email"),
        task_tools=(TaskTool("batch.run", "kind", NoArgs, "Run a batch."),),
    )

    def named(name: str) -> str:
        return agent.tool_named(ToolCall("c1", name, {})).name

    assert named("bank_deposit") == "bank.deposit"
    assert named("batch_run") == "batch.run"
    assert named("bank.deposit") == "bank.deposit"  # the real name passes as it is
    assert named("send_email") == "send_email"
    assert named("unknown_tool") == "unknown_tool"  # refused later, by its own name


def test_two_tools_one_name_on_the_wire_are_refused_when_the_agent_is_defined() -> None:
    with pytest.raises(ValueError, match=r"'bank\.deposit' and 'bank_deposit' are both"):
        Agent(name="a", system="", tools=("bank.deposit", "bank_deposit"))
