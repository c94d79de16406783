"""The tool of ``bench.roundtrip``: does nothing, in a pool of its own, so a tool call costs
only what the runtime adds around it.

Served by ``brainhands hands --pool bench --tools bench.roundtrip_tools``, which declares it
in the store: the Brain routes the calls and shows the model its schema from there.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from brainhands.hands import ToolContext, tool

POOL = "bench"


class NoArgs(BaseModel):
    """No arguments."""


@tool(pool=POOL, policy="safe")
async def ping(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
    """Answer at once with an empty result."""
    return {}
