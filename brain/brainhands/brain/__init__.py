"""The Brain: runs durable tasks (and agents built on them) from the session store.

Declare a task kind with ``TaskKind`` and its phases, register it in a ``TaskRegistry``, and
run Brains with ``brainhands brain``. A phase returns what happens next (``Goto``, ``Sleep``,
``Spawn``, ``Dispatch``, ``WaitSignal``, ``Finish``, ``Fail``); the Brain commits it
atomically.
"""

from brainhands.brain.registry import TaskKind, TaskRegistry
from brainhands.brain.task import (
    Call,
    Child,
    ChildOutcome,
    Dispatch,
    Fail,
    Finish,
    Goto,
    JoinPolicy,
    Next,
    PhaseContext,
    ReceivedSignal,
    Sleep,
    Spawn,
    TaskView,
    WaitSignal,
)

__all__ = [
    "Call",
    "Child",
    "ChildOutcome",
    "Dispatch",
    "Fail",
    "Finish",
    "Goto",
    "JoinPolicy",
    "Next",
    "PhaseContext",
    "ReceivedSignal",
    "Sleep",
    "Spawn",
    "TaskKind",
    "TaskRegistry",
    "TaskView",
    "WaitSignal",
]
