"""What a framework's driver is: the one part of a hosted agent that knows its framework.

A driver replays its agent's run against a journal (``brain.hosted.journal``): it answers
the framework's model requests from the journal (asking the real model, through the
framework's own model layer, where the journal runs out and the pass may), and its tool
calls from the journaled outcomes (wanting the others), and says where the run stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from brainhands.brain.hosted.journal import Journal, ToolRequest


@dataclass(frozen=True)
class Answered:
    """The run ended with its output, as the framework validated it (as JSON)."""

    output: Any


@dataclass(frozen=True)
class WantsTools:
    """The run reached tool calls whose outcomes are not journaled."""

    requests: tuple[ToolRequest, ...]


@dataclass(frozen=True)
class WantsModel:
    """The run needs another model answer than this pass may ask for."""


@dataclass(frozen=True)
class Stepped:
    """The run took a step that is durable once committed (a graph's super-step, its
    checkpoint kept), and goes on at the next pass."""


@dataclass(frozen=True)
class Failed:
    """The framework ended the run with an error of its own (a retry limit reached, an
    answer it cannot read): the run would end so again, so the session fails."""

    error: str


Stop = Answered | WantsTools | WantsModel | Stepped | Failed


class Driver(Protocol):
    async def run(self, prompt: str, journal: Journal) -> Stop:
        """Replay the run of ``prompt`` against ``journal``, up to where it stops."""
        ...
