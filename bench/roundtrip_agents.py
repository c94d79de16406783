"""The agent of ``bench.roundtrip``: a scripted model that calls the no-op ``ping`` tool
once, then answers. One session is one model turn with one tool call, one turn without.

Served by ``brainhands brain --compat v1 --agents bench.roundtrip_agents
--tools bench.roundtrip_tools``.
"""

from __future__ import annotations

from pathlib import Path

from brain.agent import Agent, AgentRegistry
from brain.models.scripted import ScriptedModel

SCRIPT = Path(__file__).with_name("roundtrip_script.json")
AGENT = "pinger"
COMPAT = "v1"
"""The compat the benchmark's Brain processes serve."""

agents = AgentRegistry()
agents.add(
    Agent(
        name=AGENT,
        model=ScriptedModel(SCRIPT),
        system="You ping once, then say so.",
        tools=("ping",),
    )
)
