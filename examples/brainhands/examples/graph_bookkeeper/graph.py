"""The graph bookkeeper: a LangGraph graph hosted by brainhands (see the package's docstring)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from brainhands import ToolPolicy, tool_context
from brainhands.shared.hosted.langgraph import host
from brainhands.shared.tools import QueryAnswer, ToolContextLike


def open_ledger() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ.get("BOOKS_LEDGER", "books.db"), timeout=10)
    db.execute(
        "create table if not exists sales"
        " (id integer primary key, operation_id text, item text, amount integer)"
    )
    return db


class ScriptedModel(BaseChatModel):
    """The model's script: record the sale, send the invoice, answer with what they said."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        said = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        if len(said) == 0:
            call = {"name": "record_sale", "args": {"item": "tea", "amount": 4}, "id": "sale"}
            message = AIMessage("", tool_calls=[call])
        elif len(said) == 1:
            call = {"name": "send_invoice", "args": {"to": "ann", "amount": 4}, "id": "invoice"}
            message = AIMessage("", tool_calls=[call])
        else:
            message = AIMessage(f"{said[0]}; {said[1]}")
        return ChatResult(generations=[ChatGeneration(message=message)])


model = ScriptedModel()


async def keep_books(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await model.ainvoke(state["messages"])]}


@tool
async def record_sale(item: str, amount: int) -> str:
    """Record a sale in the ledger."""
    with contextlib.closing(open_ledger()) as db, db:
        db.execute(
            "insert into sales (operation_id, item, amount) values (?, ?, ?)",
            (tool_context().operation_id, item, amount),
        )
    return f"sold {item} for {amount}"


@tool
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


builder = StateGraph(MessagesState)
builder.add_node("model", keep_books)
builder.add_node("tools", ToolNode([record_sale, send_invoice]))
builder.add_edge(START, "model")
builder.add_conditional_edges("model", tools_condition, ["tools", END])
builder.add_edge("tools", "model")

hosted = host(
    builder.compile(),
    name="graph-bookkeeper",
    pool="books",
    tools={"record_sale": ToolPolicy(policy="query", query=sale_recorded)},
)
