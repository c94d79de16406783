"""The agents of ``bench.roundtrip``: scripted models that call the no-op ``ping`` tool, then
answer. A ``pinger`` session is one model turn with one tool call and one turn without; a
``fanout`` session asks for ``FANOUT`` calls at once in its first turn.

Served by ``brainhands brain --compat v1 --agents bench.roundtrip_agents``.
"""

from __future__ import annotations

from pathlib import Path

from brainhands.brain.agent import Agent, AgentRegistry
from brainhands.brain.models.scripted import ScriptedModel

SCRIPT = Path(__file__).with_name("roundtrip_script.json")
AGENT = "pinger"
FANOUT_SCRIPT = Path(__file__).with_name("roundtrip_fanout.json")
FANOUT_AGENT = "fanout"
FANOUT = 10
"""Tool calls in a ``fanout`` session's first turn."""
COMPAT = "v1"
"""The compat the benchmark's Brain processes serve."""

agents = AgentRegistry()
for name, script, system, calls in (
    (AGENT, SCRIPT, "You ping once, then say so.", 1),
    (FANOUT_AGENT, FANOUT_SCRIPT, "You ping ten times at once, then say so.", FANOUT),
):
    agents.add(
        Agent(
            name=name,
            model=ScriptedModel(script),
            system=system,
            tools=("ping",),
            max_tool_calls=calls,
        )
    )
