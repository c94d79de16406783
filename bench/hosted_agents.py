"""The agents of ``bench.hosted``: one agent shape, written natively and with each hosted
framework, side by side.

Every agent has one tool, ``ping`` (a no-op on the ``bench`` Hands pool, ``safe``), and a
scripted model: its first turn asks for one ``ping`` call, its second answers ``ANSWER``.
The native one is ``bench.roundtrip``'s ``pinger``; each framework's is in a module of its
own (``bench/hosted_<framework>.py``), whose ``hosted`` a Brain serves (``--agents``) and
whose tools a Hands runs (``--tools``), so a framework that is not installed leaves out its
row alone.

``VARIANTS`` is the table the bench runs: a framework hosted later is one row more.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from bench.roundtrip_agents import AGENT

ANSWER = "Pinged."
"""What every agent's second model turn answers."""


@dataclass(frozen=True)
class Variant:
    """One agent of the comparison."""

    label: str
    agent: str
    """The name a submission gives (``{"agent": ...}``)."""
    module: str
    """The module that defines it: a Brain's ``--agents``."""
    tools: str
    """The module that registers its tool: a Hands' ``--tools``."""
    requires: str | None = None
    """The framework's import name: without it installed, the row is left out."""

    def installed(self) -> bool:
        return self.requires is None or importlib.util.find_spec(self.requires) is not None


def hosted(label: str, framework: str, requires: str) -> Variant:
    """The row of a framework whose agent is ``ping_<framework>`` in
    ``bench/hosted_<framework>.py``, which registers its tool too."""
    module = f"bench.hosted_{framework}"
    return Variant(label, f"ping_{framework}", module, module, requires)


NATIVE = Variant("native Agent", AGENT, "bench.roundtrip_agents", "bench.roundtrip_tools")
VARIANTS = (
    NATIVE,
    hosted("Pydantic AI", "pydantic_ai", "pydantic_ai"),
    hosted("OpenAI Agents SDK", "openai_agents", "agents"),
    hosted("LangGraph", "langgraph", "langgraph"),
    hosted("AgentScope", "agentscope", "agentscope"),
)
"""The native agent first (the others' ratios are to it), then one row per integration."""
