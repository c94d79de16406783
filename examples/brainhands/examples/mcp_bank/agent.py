"""The bank example's agent: deposits into an account with the MCP bank's ``bank.deposit``,
then reads the balance back with ``bank.balance`` -- tools a Hands pool serves from the
server (``mcp.json``), named like any tool's.

The model is scripted (``script.json``), so the example runs with no network; swap in
``OpenAIChatModel`` to drive it with a real model.
"""

from __future__ import annotations

from pathlib import Path

from brainhands.brain.agent import Agent, AgentRegistry
from brainhands.brain.models.scripted import ScriptedModel

agents = AgentRegistry()
agents.add(
    Agent(
        name="teller",
        model=ScriptedModel(Path(__file__).with_name("script.json")),
        system="You move money with the bank's tools, then say what the balance is.",
        tools=("bank.deposit", "bank.balance"),
    )
)
