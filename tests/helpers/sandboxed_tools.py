"""Tools for the sandbox's end-to-end tests (pool ``sandboxed``): each runs a shell script
in its sandbox with ``ctx.run`` and answers with what it printed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from brainhands.hands import Sandbox, ToolContext, tool


class Script(BaseModel):
    script: str


@tool(pool="sandboxed", sandbox=Sandbox(output_bytes=64 * 1024, wall_seconds=10))
async def shell(args: Script, ctx: ToolContext) -> dict[str, Any]:
    """Run a shell script in a sandbox; answer with its exit status and its output."""
    done = await ctx.run(["sh", "-c", args.script])
    return {"status": done.status, "stdout": done.stdout.decode()}


@tool(pool="sandboxed")
async def undeclared(args: Script, ctx: ToolContext) -> dict[str, Any]:
    """Run a shell script, without having declared a sandbox: refused."""
    done = await ctx.run(["sh", "-c", args.script])
    return {"status": done.status}
