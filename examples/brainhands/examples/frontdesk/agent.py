"""The front desk: an AgentScope agent hosted by brainhands (see the package's docstring)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from typing import Any

from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from agentscope.model import ChatModelBase, ChatResponse
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, ToolChunk, Toolkit

from brainhands import ToolPolicy, tool_context
from brainhands.shared.hosted.agentscope import host
from brainhands.shared.tools import QueryAnswer, ToolContextLike

GUEST = {"guest": "Ada Lovelace", "nights": 2}


def open_ledger() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ.get("FRONTDESK_LEDGER", "frontdesk.db"), timeout=10)
    db.execute(
        "create table if not exists bookings"
        " (id integer primary key, operation_id text, guest text, nights integer)"
    )
    return db


class Script(ChatModelBase):
    """The model's script: book the room, tell the guest, then say what was done."""

    def __init__(self) -> None:
        super().__init__(
            OpenAICredential(api_key="unused"), "script", ChatModelBase.Parameters(), stream=False
        )
        self.formatter = OpenAIChatFormatter()

    async def _call_api(
        self, model_name: str, messages: list[Msg], *args: Any, **kwargs: Any
    ) -> ChatResponse:
        blocks = [block for msg in messages for block in msg.get_content_blocks()]
        said = [
            "".join(getattr(part, "text", "") for part in block.output)
            for block in blocks
            if isinstance(block, ToolResultBlock) and not isinstance(block.output, str)
        ]
        content: list[Any]
        if not said:
            content = [ToolCallBlock(id="book", name="book_room", input=json.dumps(GUEST))]
        elif len(said) == 1:
            notice = {"guest": GUEST["guest"]}
            content = [ToolCallBlock(id="notify", name="notify_guest", input=json.dumps(notice))]
        else:
            content = [TextBlock(text=" and ".join(said))]
        return ChatResponse(content=content, is_last=True)


def said(text: str) -> ToolChunk:
    """A tool's answer, as AgentScope's tools give it."""
    return ToolChunk(content=[TextBlock(text=text)])


async def book_room(guest: str, nights: int) -> ToolChunk:
    """Book a room.

    Args:
        guest (`str`): who stays.
        nights (`int`): how many nights.
    """
    with contextlib.closing(open_ledger()) as db, db:
        db.execute(
            "insert into bookings (operation_id, guest, nights) values (?, ?, ?)",
            (tool_context().operation_id, guest, nights),
        )
    return said(f"booked {nights} nights for {guest}")


async def notify_guest(guest: str) -> ToolChunk:
    """Tell the guest (the mail service cannot be asked what it sent).

    Args:
        guest (`str`): whom to tell.
    """
    return said(f"told {guest}")


async def booked(arguments: dict[str, Any], ctx: ToolContextLike) -> QueryAnswer:
    """Did ``book_room`` under ``ctx.operation_id`` land? Asked after a cut-short call."""
    with contextlib.closing(open_ledger()) as db:
        row = db.execute(
            "select guest, nights from bookings where operation_id = ?", (ctx.operation_id,)
        ).fetchone()
    return QueryAnswer(row is not None, f"booked {row[1]} nights for {row[0]}" if row else None)


routine = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="the desk's routine")
clerk = Agent(
    name="clerk",
    system_prompt="Run the front desk: book the room, then tell the guest.",
    model=Script(),
    toolkit=Toolkit(
        tools=[
            FunctionTool(book_room, permission=routine),
            FunctionTool(notify_guest, permission=routine),
        ]
    ),
)

hosted = host(
    clerk,
    name="frontdesk",
    pool="frontdesk",
    tools={"book_room": ToolPolicy(policy="query", query=booked)},
)
