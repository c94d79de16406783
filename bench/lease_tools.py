"""The tool of ``bench.lease_renewal``: an ``unsafe`` call that takes a while, so a lease lost
under it shows as an ``uncertain`` outcome; and the job that calls it.

``burn_ms`` makes the call keep the event loop busy for that many milliseconds in every
100 ms of its run (a tool doing CPU work between its awaits), starving everything else in
the process, lease renewal included.

Served by ``brainhands hands --pool leasebench --tools bench.lease_tools``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel

from brainhands.hands import ToolContext, tool
from brainhands.shared.messages import ToolJob

POOL = "leasebench"
COMPAT = "leasebench"
SLICE = 0.1
"""Seconds of one sleep-then-burn step of a call."""


class WorkArgs(BaseModel):
    """How long the call takes, and how much of it keeps the event loop busy."""

    seconds: float
    burn_ms: float = 0.0


@tool(pool=POOL, policy="unsafe")
async def work(args: WorkArgs, ctx: ToolContext) -> dict[str, Any]:
    """Take ``seconds``, burning ``burn_ms`` of CPU on the event loop in every 100 ms."""
    end = time.monotonic() + args.seconds
    burn = min(args.burn_ms / 1000, SLICE)
    while (left := end - time.monotonic()) > 0:
        await asyncio.sleep(min(left, SLICE - burn))
        busy_until = time.monotonic() + min(burn, max(0.0, end - time.monotonic()))
        while time.monotonic() < busy_until:
            pass
    return {}


def work_job(operation_id: str, seconds: float, burn_ms: float = 0.0) -> ToolJob:
    """A job for ``work``, of its own session and compat ``leasebench``."""
    return ToolJob(
        operation_id=operation_id,
        tool="work",
        arguments={"seconds": seconds, "burn_ms": burn_ms},
        session_id=f"session-{operation_id}",
        task_id=f"task-{operation_id}",
        compat=COMPAT,
        pool=POOL,
    )
