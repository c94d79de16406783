"""Task kinds the Brain worker processes of ``bench.kernel`` load (``--tasks bench.kernel_tasks``).

``bench.nap`` sleeps until the epoch second its input names (``{"until": T}``), then
finishes with the time its ``wake`` phase started, so the benchmark can tell the timer's
delay from the cost of the finishing commit.
"""

from __future__ import annotations

from typing import Any

from brainhands.brain import Finish, Next, PhaseContext, Sleep, TaskKind, TaskRegistry, TaskView

NAP_KIND = "bench.nap"
COMPAT = "bench"
"""The compat the benchmark's Brain processes serve."""

registry = TaskRegistry()

nap_kind = registry.add(TaskKind(NAP_KIND))


@nap_kind.phase("nap")
async def nap(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Sleep(then="wake", until=float(task.input["until"]))


@nap_kind.phase("wake")
async def wake(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish({"woke_at": ctx.now})
