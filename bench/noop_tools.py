"""The tool of ``bench.hands``: does nothing, so a job costs only what the runtime adds.

Served by ``brainhands hands --pool bench --tools bench.noop_tools``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from hands import ToolContext, tool


class NoArgs(BaseModel):
    """No arguments."""


@tool(pool="bench", policy="safe")
async def noop(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
    """Return an empty result at once."""
    return {}
