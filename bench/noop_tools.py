"""The tool of ``bench.hands``: does nothing, so a job costs only what the runtime adds; and
the job that calls it (``bench.relay`` publishes the same jobs).

Served by ``brainhands hands --pool bench --tools bench.noop_tools``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from brainhands.hands import ToolContext, tool
from brainhands.shared.messages import ToolJob

POOL = "bench"
COMPAT = "bench"


class NoArgs(BaseModel):
    """No arguments."""


@tool(pool=POOL, policy="safe")
async def noop(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
    """Return an empty result at once."""
    return {}


def noop_job(operation_id: str, pool: str = POOL) -> ToolJob:
    """A job for ``noop``, of session ``bench-session`` and compat ``bench``."""
    return ToolJob(
        operation_id=operation_id,
        tool="noop",
        arguments={},
        session_id="bench-session",
        task_id=f"task-{operation_id}",
        compat=COMPAT,
        pool=pool,
    )
