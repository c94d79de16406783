"""Values far larger than ``MAX_INLINE_JSON`` moving between the Brain and Hands: tools, task
kinds and an agent for the tests of arguments and results by reference. One module serves
as a Brain's ``--tasks`` and ``--agents`` and as a Hands worker's ``--tools`` (pool
``bulk``)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from brainhands.brain import Dispatch, Finish, Next, PhaseContext, TaskKind, TaskRegistry, TaskView
from brainhands.brain.agent import Agent, AgentRegistry
from brainhands.brain.models.scripted import ScriptedModel
from brainhands.hands import ToolContext, tool

SIZE = 1024 * 1024
"""The size of the large values: 16 times ``MAX_INLINE_JSON``."""
POOL = "bulk"


def text_of(size: int) -> str:
    """``size`` characters that vary along the text, so a truncated, shifted or partly lost
    copy has another digest."""
    blocks = (hashlib.sha256(str(n).encode()).hexdigest() for n in range(size // 64 + 1))
    return "".join(blocks)[:size]


def digest(value: Any) -> str:
    """The SHA-256 of a JSON value, independent of key order."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


class Size(BaseModel):
    size: int


class Text(BaseModel):
    text: str


@tool(pool=POOL, policy="safe")
async def large_result(args: Size, ctx: ToolContext) -> dict[str, Any]:
    """Returns ``text_of(size)``."""
    return {"text": text_of(args.size)}


@tool(pool=POOL, policy="safe")
async def digest_text(args: Text, ctx: ToolContext) -> dict[str, Any]:
    """Says what it received: the digest and length of ``text``."""
    return {"sha256": digest(args.text), "length": len(args.text)}


registry = TaskRegistry()
reader = registry.add(TaskKind("read_large"))


@reader.phase("call")
async def call_large_result(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Dispatch("large_result", {"size": task.input["size"]}, then="read")


@reader.phase("read")
async def read_large_result(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    [outcome] = task.children
    seen = digest(outcome.result["result"]) if outcome.outcome == "succeeded" else None
    return Finish({"outcome": outcome.outcome, "error": outcome.error, "sha256": seen})


sender = registry.add(TaskKind("send_large"))


@sender.phase("call")
async def call_digest_text(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Dispatch("digest_text", {"text": text_of(task.input["size"])}, then="read")


@sender.phase("read")
async def read_digest(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    [outcome] = task.children
    return Finish({"outcome": outcome.outcome, "result": outcome.result, "error": outcome.error})


agents = AgentRegistry()
agents.add(
    Agent(
        name="bulky",
        model=ScriptedModel(
            Path(__file__).with_name("scripts") / "large_result.json",
            log_path=os.environ.get("TEST_MODEL_LOG") or None,
        ),
        system="You fetch large texts.",
        tools=("large_result",),
    )
)
