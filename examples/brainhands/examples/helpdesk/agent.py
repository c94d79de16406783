"""The help desk: OpenAI Agents SDK agents hosted by brainhands (see the package's
docstring)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from typing import Any

from agents import Agent, Model, ModelResponse, Usage, function_tool
from agents.testing import assistant_message, function_call
from pydantic import BaseModel

from brainhands import ToolPolicy, tool_context
from brainhands.shared.hosted.openai_agents import host
from brainhands.shared.tools import QueryAnswer, ToolContextLike


class Resolution(BaseModel):
    """What the refunds agent answers with."""

    refund: str
    notice: str


def open_ledger() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ.get("DESK_LEDGER", "desk.db"), timeout=10)
    db.execute(
        "create table if not exists refunds"
        " (id integer primary key, operation_id text, order_id integer)"
    )
    return db


class Script(Model):
    """The model's script: triage hands over; refunds refunds, notifies, and resolves."""

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = json.loads(json.dumps(input, default=str)) if isinstance(input, list) else []
        said = [i["output"] for i in items if i.get("type") == "function_call_output"]
        if system_instructions == TRIAGE:
            output = [function_call("transfer_to_refunds", {}, call_id="handoff")]
        elif len(said) == 1:  # the handoff's own output
            output = [function_call("refund", {"order_id": 42}, call_id="refund")]
        elif len(said) == 2:
            output = [function_call("notify", {"order_id": 42}, call_id="notify")]
        else:
            resolution = Resolution(refund=said[1], notice=said[2])
            output = [assistant_message(resolution.model_dump_json())]
        return ModelResponse(output=output, usage=Usage(requests=1), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the script is not streamed")


@function_tool
async def refund(order_id: int) -> str:
    """Refund an order."""
    with contextlib.closing(open_ledger()) as db, db:
        db.execute(
            "insert into refunds (operation_id, order_id) values (?, ?)",
            (tool_context().operation_id, order_id),
        )
    return f"refunded order {order_id}"


@function_tool
async def notify(order_id: int) -> str:
    """Tell the customer (the mail service cannot be asked what it sent)."""
    return f"notified the buyer of order {order_id}"


async def refunded(arguments: dict[str, Any], ctx: ToolContextLike) -> QueryAnswer:
    """Did ``refund`` under ``ctx.operation_id`` land? Asked after a cut-short call."""
    with contextlib.closing(open_ledger()) as db:
        row = db.execute(
            "select order_id from refunds where operation_id = ?", (ctx.operation_id,)
        ).fetchone()
    return QueryAnswer(row is not None, f"refunded order {row[0]}" if row else None)


TRIAGE = "Route each request to the agent for it."
script = Script()
refunds = Agent(
    name="refunds",
    instructions="Refund the order, then tell the buyer.",
    model=script,
    tools=[refund, notify],
    output_type=Resolution,
)
triage = Agent(name="triage", instructions=TRIAGE, model=script, handoffs=[refunds])

hosted = host(
    triage,
    name="helpdesk",
    pool="desk",
    tools={"refund": ToolPolicy(policy="query", query=refunded)},
)
