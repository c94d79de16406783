"""Agents for the cut-off tests (``test_agent_cut_off``): one of each ``on_length`` policy,
on the chat-completions adapter, served by the test's ``ChatServer`` at ``TEST_MODEL_URL``."""

from __future__ import annotations

import os
from typing import Literal

from brainhands.brain.agent import Agent, AgentRegistry
from brainhands.brain.models.openai import OpenAIChatModel

HTTP_MODEL_URL = os.environ.get("TEST_MODEL_URL", "http://127.0.0.1:9/v1")

POLICIES: dict[str, Literal["fail", "continue"]] = {"cut_short": "fail", "carrying_on": "continue"}

agents = AgentRegistry()
for name, policy in POLICIES.items():
    agents.add(
        Agent(
            name=name,
            model=OpenAIChatModel(HTTP_MODEL_URL, "test-model", None, timeout=5, max_tokens=4),
            system="You tell stories.",
            tools=("echo",),
            on_length=policy,
            retry_delay=0.2,  # a cut-off answer retried as transient would be asked again soon
        )
    )
