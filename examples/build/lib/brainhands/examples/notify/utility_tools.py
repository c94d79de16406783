"""A harmless tool for the ``default`` Hands pool, so a deployment can run that pool too.

``brainhands hands --pool default --tools brainhands.examples.notify.utility_tools`` serves it; the
notify tools (``brainhands.examples.notify.tools``) all live in the ``email`` pool.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from brainhands.hands import ToolContext, tool


class NoArgs(BaseModel):
    """``now`` takes no arguments."""


@tool(pool="default", policy="safe", timeout=5)
async def now(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
    """The current time in UTC, as an ISO 8601 string."""
    return {"utc": datetime.now(UTC).isoformat()}
