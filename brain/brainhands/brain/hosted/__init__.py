"""Agents of other frameworks, run by the Brain (``brainhands.shared.hosted``).

One mechanism for every framework: the run is the framework's own loop, replayed at every
pass against the session's journal (``journal``) by the framework's driver (``driver``),
inside the ``hosted.session`` task (``session``). A framework's module holds its driver
only (``pydantic_ai``, ``openai_agents``, ``langgraph``, ``agentscope``), imported when an
agent of that framework is hosted: a Brain that hosts none does not need the framework
installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from brainhands.brain.hosted.driver import Driver
from brainhands.brain.hosted.session import SESSION_KIND, hosted_kinds
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.hosted import HostedAgent

__all__ = ["SESSION_KIND", "Driver", "drivers_of", "hosted_kinds"]

DRIVERS = {
    "pydantic_ai": "brainhands.brain.hosted.pydantic_ai:PydanticAIDriver",
    "langgraph": "brainhands.brain.hosted.langgraph:LangGraphDriver",
    "openai_agents": "brainhands.brain.hosted.openai_agents:OpenAIAgentsDriver",
    "agentscope": "brainhands.brain.hosted.agentscope:AgentScopeDriver",
}
"""Each framework's driver, by the name its integration gives (``HostedAgent.framework``)."""


def drivers_of(hosted: Iterable[HostedAgent]) -> dict[str, Driver]:
    """A driver for each of the ``hosted`` agents, by agent name."""
    drivers: dict[str, Driver] = {}
    for agent in hosted:
        if agent.framework not in DRIVERS:
            raise ConfigurationError(
                f"agent {agent.name!r}: no driver for the framework {agent.framework!r}"
            )
        module, _, name = DRIVERS[agent.framework].partition(":")
        drivers[agent.name] = getattr(importlib.import_module(module), name)(agent)
    return drivers
