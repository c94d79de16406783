"""The journal of a hosted agent's run: what its framework is handed back when the run is
replayed, and what the pass that replayed it asked for.

A hosted run (``brainhands.brain.hosted``) is the framework's own loop, run again from its
start at every pass of the Brain, against what the session's entries already hold: the
model's answers in order (``hosted_model`` entries, as the framework encodes a response),
the tool calls' outcomes by the framework's call id (``tool_result`` entries), and the
results of the steps its driver keeps (``hosted_step`` entries, by their key in the run). A run is
deterministic in those, so every pass rebuilds the context every earlier pass saw, a Brain
killed in the middle included. Where the journal runs out, the pass asks: one new model
answer at most (kept in ``fresh`` and committed with what the run reached after it, with
the steps taken meanwhile: ``taken``), and the tool calls of the answer it reached
(``wanted``), which become durable calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from brainhands.brain.budget import Usage
from brainhands.shared.store import EntryRecord
from brainhands.shared.vocabulary import HOSTED_CHECKPOINT_KIND, HOSTED_MODEL_KIND, HOSTED_STEP_KIND

MODEL_ENTRY = HOSTED_MODEL_KIND
"""The kind of the entry that keeps one model answer of a hosted run."""
CHECKPOINT_ENTRY = HOSTED_CHECKPOINT_KIND
"""The kind of the entry that keeps one record of a framework's own recovery state."""

STEP_ENTRY = HOSTED_STEP_KIND
"""The kind of the entry that keeps one step's result (``{"key": ..., "result": ...}``)."""


@dataclass(frozen=True)
class ModelTurn:
    """One model answer, as its framework encodes it, and what it cost."""

    raw: Any
    model: str
    input_tokens: int = 0
    output_tokens: int = 0

    def usage(self) -> Usage:
        """What it spent, as a run's budget counts it (``brain.budget``)."""
        return Usage(self.input_tokens, self.output_tokens, model_calls=1)

    def entry(self) -> dict[str, Any]:
        return {"raw": self.raw, "model": self.model, "usage": self.usage().to_json()}


@dataclass(frozen=True)
class ToolRequest:
    """A tool call the run reached with no outcome journaled: to be made durable."""

    call_id: str
    tool: str
    """The brainhands tool (``<agent>.<tool>``)."""
    arguments: dict[str, Any]
    approval: bool
    resume: bool = False
    """Not a tool's call: the run waits for a decision only (a graph's ``interrupt()``),
    made through an approval that, approved, resumes the run (``RESUME_KIND``)."""


class TurnNeeded(Exception):
    """Raised by a driver's model when the run needs an answer this pass may not ask for:
    the pass ends, and the next goes on from the answer just committed."""


@dataclass
class Journal:
    turns: Sequence[Any]
    """The framework's encoded model answers, in the order they were asked for."""
    outcomes: dict[str, dict[str, Any]]
    """The tool calls' outcomes (``tool_result`` bodies) by the framework's call id."""
    checkpoints: Sequence[dict[str, Any]] = ()
    """The framework's own recovery records (a graph's checkpoints), in commit order."""
    steps: dict[str, Any] = field(default_factory=dict)
    """The kept steps' results, by their key in the run."""
    fresh: list[ModelTurn] = field(default_factory=list)
    fresh_checkpoints: list[dict[str, Any]] = field(default_factory=list)
    """Recovery records this pass made: committed with what the pass reached."""
    taken: dict[str, Any] = field(default_factory=dict)
    wanted: list[ToolRequest] = field(default_factory=list)
    may_ask: int = 1

    @classmethod
    def of(cls, entries: Iterable[EntryRecord], *, since: int) -> Journal:
        """The journal of the run whose first entry came after seq ``since``."""
        turns: list[Any] = []
        outcomes: dict[str, dict[str, Any]] = {}
        checkpoints: list[dict[str, Any]] = []
        steps: dict[str, Any] = {}
        for entry in entries:
            if entry.seq <= since:
                continue
            if entry.kind == MODEL_ENTRY:
                turns.append(entry.body["raw"])
            elif entry.kind == "tool_result":
                outcomes[entry.body["call_id"]] = entry.body
            elif entry.kind == CHECKPOINT_ENTRY:
                checkpoints.append(entry.body)
            elif entry.kind == STEP_ENTRY:
                steps[entry.body["key"]] = entry.body["result"]
        return cls(turns, outcomes, checkpoints=checkpoints, steps=steps)

    def answer(self, n: int) -> Any | None:
        """The ``n``-th answer (0-based), journaled or fresh; None if there is none yet."""
        known = [*self.turns, *(t.raw for t in self.fresh)]
        return known[n] if n < len(known) else None

    def record(self, turn: ModelTurn) -> None:
        """Keep an answer just asked for."""
        self.fresh.append(turn)

    def step(self, key: str) -> Any | None:
        """The result of the step ``key``, kept or taken in this pass; None if not taken."""
        return self.steps.get(key, self.taken.get(key))

    def keep(self, key: str, result: Any) -> None:
        """Keep the result of a step just taken (JSON, not None)."""
        self.taken[key] = result

    def can_ask(self) -> bool:
        """This pass may ask for another answer (``may_ask`` per pass)."""
        return len(self.fresh) < self.may_ask
