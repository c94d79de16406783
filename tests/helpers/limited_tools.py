"""Tools of the ``limits`` pool, each call recorded at its external ledger
(``tests.helpers.ledgers``, ``HOSTED_LEDGERS``) with when it began and ended."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from brainhands.hands import ToolContext, tool
from tests.helpers.ledgers import note_call


class Work(BaseModel):
    seconds: float = 0.0


async def recorded_call(name: str, args: Work, ctx: ToolContext) -> dict[str, float]:
    began = time.time()
    # In a thread: a ledger's disk must not hold up the Hands' other calls.
    await asyncio.to_thread(note_call, name, ctx.operation_id, began, None)
    try:
        await asyncio.sleep(args.seconds)
    finally:  # a call cancelled (its lease lost) ends here too; a killed one never ends
        note_call(name, ctx.operation_id, began, time.time())
    return {"began": began}


@tool(pool="limits", concurrency=3)
async def three_at_once(args: Work, ctx: ToolContext) -> dict[str, float]:
    """At most three calls run at once, across every Hands."""
    return await recorded_call("three_at_once", args, ctx)


@tool(pool="limits", rate=20)
async def twenty_a_second(args: Work, ctx: ToolContext) -> dict[str, float]:
    """At most twenty calls start a second, one every 50 ms."""
    return await recorded_call("twenty_a_second", args, ctx)


@tool(pool="limits", rate=1)
async def one_a_second(args: Work, ctx: ToolContext) -> dict[str, float]:
    """One call a second."""
    return await recorded_call("one_a_second", args, ctx)


@tool(pool="limits")
async def unlimited(args: Work, ctx: ToolContext) -> dict[str, float]:
    """No limit."""
    return await recorded_call("unlimited", args, ctx)
