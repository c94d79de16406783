"""The Brain: runs durable tasks (and agents built on them) from the session store.

Declare a task kind with ``TaskKind`` and its phases, register it in a ``TaskRegistry``, and
run Brains with ``brainhands brain``. A phase returns what happens next (``Goto``, ``Sleep``,
``Spawn``, ``Dispatch``, ``WaitSignal``, ``Finish``, ``Fail``); the Brain commits it
atomically.
"""

from brainhands.brain.registry import TaskKind, TaskRegistry

# The phase vocabulary, as ``task.__all__`` lists it (a tuple: ``+=`` makes a new one).
from brainhands.brain.task import *  # noqa: F403
from brainhands.brain.task import __all__

__all__ += ("TaskKind", "TaskRegistry")
