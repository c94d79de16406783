"""Agents for the budget tests (``test_budget``): one on the chat-completions adapter,
served by the test's ``ChatServer`` at ``TEST_MODEL_URL``, its tokens priced; one on a
scripted model whose agent allows one tool call per run."""

from __future__ import annotations

import os

from brainhands.brain.agent import Agent, AgentRegistry
from brainhands.brain.budget import Budget, Price
from brainhands.brain.models.openai import OpenAIChatModel
from brainhands.brain.models.scripted import ScriptedModel
from tests.helpers.agents import SCRIPTS

HTTP_MODEL_URL = os.environ.get("TEST_MODEL_URL", "http://127.0.0.1:9/v1")
PRICE = Price(input=2.0, output=10.0)
"""Per million tokens: a 60 + 40 token answer costs 0.00052."""

agents = AgentRegistry()
agents.add(
    Agent(
        name="thrifty",  # its budget comes with the submission
        model=OpenAIChatModel(HTTP_MODEL_URL, "test-model", None, timeout=5),
        system="You send emails.",
        tools=("send_safe",),
        price=PRICE,
        retry_delay=0.2,
    )
)
agents.add(
    Agent(
        name="frugal",  # its first turn asks for two calls: over its budget of one
        model=ScriptedModel(SCRIPTS / "errand.json"),
        system="You send emails with the tools you have.",
        tools=("send_safe", "send_query", "send_unsafe"),
        budget=Budget(tool_calls=1),
    )
)
