"""Tools for the workspaces' end-to-end tests (pool ``workspace``), each working in the
session's workspace ``repo``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from brainhands.hands import Sandbox, ToolContext, ToolError, tool


class Line(BaseModel):
    path: str
    line: str


class Script(BaseModel):
    script: str


@tool(pool="workspace", workspace="repo")
async def append_line(args: Line, ctx: ToolContext) -> dict[str, Any]:
    """Append a line to a file of the workspace; answer with the file's lines."""
    file = ctx.workdir / args.path
    file.parent.mkdir(parents=True, exist_ok=True)
    with file.open("a") as out:
        out.write(args.line + "\n")
    return {"lines": len(file.read_text().splitlines())}


@tool(pool="workspace", workspace="repo", sandbox=Sandbox(wall_seconds=20))
async def shell_in_repo(args: Script, ctx: ToolContext) -> dict[str, Any]:
    """Run a shell script in the workspace, in a sandbox."""
    done = await ctx.run(["sh", "-c", args.script])
    return {"status": done.status, "stdout": done.stdout.decode()}


@tool(pool="workspace", workspace="repo", workspace_read_only=True)
async def read_text(args: Line, ctx: ToolContext) -> dict[str, Any]:
    """Read a file of the workspace (and scribble on it: a reader's changes are dropped)."""
    file = ctx.workdir / args.path
    text = file.read_text()
    file.write_text("scribbled")
    return {"text": text}


@tool(pool="workspace", workspace="repo")
async def write_then_fail(args: Line, ctx: ToolContext) -> dict[str, Any]:
    """Write a file, then fail for good: the file is not kept."""
    (ctx.workdir / args.path).write_text(args.line)
    raise ToolError("failed after writing", retryable=False)


@tool(pool="workspace", workspace="repo")
async def half_write(args: Line, ctx: ToolContext) -> dict[str, Any]:
    """Write half of a file; on the first attempt, stay there (the test kills the worker),
    leaving a mark in ``$TEST_MARKS`` to say so."""
    file = ctx.workdir / args.path
    file.write_text("half")
    if ctx.attempt == 1:
        (Path(os.environ["TEST_MARKS"]) / ctx.operation_id).touch()
        await asyncio.sleep(3600)
    file.write_text(args.line)
    return {"attempt": ctx.attempt}
