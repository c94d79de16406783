"""What a task phase sees and what it returns.

A phase is ``async def phase(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next``.
It runs outside any transaction and never commits: whatever it returns, together with the
changes it made to ``docs`` (the session documents its task kind declares), is applied by
the scheduler in one commit. Recovery re-enters a phase from its start, so a phase must be
safe to run again until its result is committed: external effects belong in tools
(``Dispatch``), whose operation ids make them recognizable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

JoinPolicy = Literal["all_settled", "fail_fast"]
Outcome = Literal["succeeded", "failed", "cancelled"]


@dataclass(frozen=True)
class ChildOutcome:
    """How a task this one waited for ended."""

    task_id: str
    kind: str
    input: Any
    outcome: Outcome
    result: Any
    error: Any


@dataclass(frozen=True)
class TaskView:
    """A task as its phase sees it: read-only."""

    id: str
    kind: str
    version: int
    session_id: str
    parent_id: str | None
    input: Any
    state: Any
    """What the previous phase handed on (``Goto(..., state=...)``)."""
    phase: str
    attempt: int
    """How many times this phase has been entered (1 the first time; more after crashes)."""
    children: list[ChildOutcome] = field(default_factory=list)
    """Outcomes of the tasks the last wait was for, in the order they were spawned."""


@dataclass(frozen=True)
class PhaseContext:
    """The world around a running phase."""

    session_id: str
    compat: str
    now: float = field(default_factory=time.time)


# What a phase returns -------------------------------------------------------------------


@dataclass(frozen=True)
class Goto:
    """Run ``phase`` next, handing it ``state``."""

    phase: str
    state: Any = None


@dataclass(frozen=True)
class Sleep:
    """Sleep until ``until`` (epoch seconds) or for ``seconds``, then run ``then``."""

    then: str
    seconds: float | None = None
    until: float | None = None
    state: Any = None

    def wake_at(self, now: float) -> float:
        if (self.seconds is None) == (self.until is None):
            raise ValueError("Sleep needs exactly one of seconds= or until=")
        return self.until if self.until is not None else now + (self.seconds or 0.0)


@dataclass(frozen=True)
class Child:
    """A child task to spawn."""

    kind: str
    input: Any
    version: int | None = None
    """Default: the newest version registered for ``kind``."""


@dataclass(frozen=True)
class Spawn:
    """Create ``children``, wait for them under ``join``, then run ``then``."""

    children: list[Child]
    then: str
    join: JoinPolicy = "all_settled"
    state: Any = None


@dataclass(frozen=True)
class Dispatch:
    """Call a tool on its Hands pool, wait for its outcome, then run ``then``.

    ``operation_id`` is the call's idempotency key; by default one is derived from the
    commit that records the intent. The outcome arrives as the only child outcome.
    """

    tool: str
    arguments: dict[str, Any]
    then: str
    operation_id: str | None = None
    state: Any = None


@dataclass(frozen=True)
class Finish:
    """The task succeeded with ``result``."""

    result: Any = None


@dataclass(frozen=True)
class Fail:
    """The task failed with ``error``."""

    error: Any


Next = Goto | Sleep | Spawn | Dispatch | Finish | Fail
