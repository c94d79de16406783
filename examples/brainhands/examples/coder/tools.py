"""The coder's tools (pool ``coder``), each working in the session's workspace ``project``:
its edits and test runs are what commit the workspace's versions."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, Field

from brainhands import Sandbox, ToolContext, tool

POOL = "coder"
WORKSPACE = "project"


class NoArguments(BaseModel):
    pass


class FileEdit(BaseModel):
    path: str = Field(description="the file's path in the project")
    content: str = Field(description="the file's whole new content")


@tool(
    pool=POOL,
    workspace=WORKSPACE,
    sandbox=Sandbox(wall_seconds=60, output_bytes=64 * 1024),
    timeout=90,
)
async def run_tests(args: NoArguments, ctx: ToolContext) -> dict[str, Any]:
    """Run the project's tests; say whether they passed, and the end of their output."""
    # -B: no byte code written into the workspace, so a run leaves the files as they were.
    done = await ctx.run(["python3", "-B", "-m", "unittest", "-q"])
    output = (done.stdout + done.stderr).decode(errors="replace")
    return {"passed": done.ok, "output": output[-2000:]}


@tool(pool=POOL, workspace=WORKSPACE)
async def write_file(args: FileEdit, ctx: ToolContext) -> dict[str, Any]:
    """Replace a file of the project with new content; answer with the unified diff."""
    file = ctx.workdir / args.path
    if not file.resolve().is_relative_to(ctx.workdir.resolve()):
        raise ValueError(f"{args.path!r} is outside the project")
    before = file.read_text() if file.exists() else ""
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(args.content)
    diff = difflib.unified_diff(
        before.splitlines(keepends=True),
        args.content.splitlines(keepends=True),
        fromfile=f"a/{args.path}",
        tofile=f"b/{args.path}",
    )
    return {"diff": "".join(diff)}
