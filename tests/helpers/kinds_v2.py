"""A newer Brain build's task kinds: ``steps`` at version 2, and how v1 tasks move up."""

from __future__ import annotations

from typing import Any

from brainhands.brain import Finish, Goto, Next, PhaseContext, TaskKind, TaskRegistry, TaskView

registry = TaskRegistry()
steps = registry.add(TaskKind("steps", version=2))


@steps.phase("one")
async def one(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Goto("two", state={"from": "one", "build": 2})


@steps.phase("two")
async def two(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish({"build": 2, "input": task.input, "state": task.state})


@steps.phase("three")
async def three(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish({"build": 2, "input": task.input, "resumed_from": "three"})


@registry.migration("steps", from_version=1)
def from_v1(input: Any, state: Any) -> tuple[Any, Any]:
    return {**input, "migrated": True}, state
