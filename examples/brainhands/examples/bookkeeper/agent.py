"""The bookkeeper: a Pydantic AI agent hosted by brainhands (see the package's docstring)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from brainhands import ToolPolicy, tool_context
from brainhands.shared.hosted.pydantic_ai import host
from brainhands.shared.tools import QueryAnswer, ToolContextLike


class Receipt(BaseModel):
    """What the bookkeeper answers with, validated by Pydantic AI."""

    sale: str
    invoice: str


def open_ledger() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ.get("BOOKS_LEDGER", "books.db"), timeout=10)
    db.execute(
        "create table if not exists sales"
        " (id integer primary key, operation_id text, item text, amount integer)"
    )
    return db


def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model's script: record the sale, send the invoice, answer with the receipt."""
    answered = sum(isinstance(m, ModelResponse) for m in messages)
    if answered == 0:
        call = ToolCallPart("record_sale", {"item": "tea", "amount": 4}, tool_call_id="sale")
    elif answered == 1:
        call = ToolCallPart("send_invoice", {"to": "ann", "amount": 4}, tool_call_id="invoice")
    else:
        said = [p.content for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        receipt = {"sale": str(said[0]), "invoice": str(said[1])}
        call = ToolCallPart(info.output_tools[0].name, receipt, tool_call_id="receipt")
    return ModelResponse(parts=[call])


bookkeeper = Agent(
    FunctionModel(play),
    instructions="You keep the books: record each sale, then invoice the buyer.",
    output_type=Receipt,
)


@bookkeeper.tool_plain
async def record_sale(item: str, amount: int) -> str:
    """Record a sale in the ledger."""
    with contextlib.closing(open_ledger()) as db, db:
        db.execute(
            "insert into sales (operation_id, item, amount) values (?, ?, ?)",
            (tool_context().operation_id, item, amount),
        )
    return f"sold {item} for {amount}"


@bookkeeper.tool_plain
async def send_invoice(to: str, amount: int) -> str:
    """Send the buyer an invoice (the mail service cannot be asked what it sent)."""
    return f"invoiced {to} for {amount}"


async def sale_recorded(arguments: dict[str, Any], ctx: ToolContextLike) -> QueryAnswer:
    """Did ``record_sale`` under ``ctx.operation_id`` land? Asked after a cut-short call."""
    with contextlib.closing(open_ledger()) as db:
        row = db.execute(
            "select item, amount from sales where operation_id = ?", (ctx.operation_id,)
        ).fetchone()
    return QueryAnswer(row is not None, f"sold {row[0]} for {row[1]}" if row else None)


hosted = host(
    bookkeeper,
    name="bookkeeper",
    pool="books",
    tools={"record_sale": ToolPolicy(policy="query", query=sale_recorded)},
)
