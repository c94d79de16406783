"""A real MCP server for tests, written with the ``mcp`` SDK's server API: a small bank
whose every effect is a row of its own SQLite ledger, the judge of duplicates.

    python -m tests.helpers.mcp_ledger_server LEDGER.db stdio
    python -m tests.helpers.mcp_ledger_server LEDGER.db http PORT

Its tools, one per kind of annotation: ``balance`` (read-only), ``set_limit``
(idempotent), ``deposit`` (additive, no dedupe of its own) with ``find_deposit`` to look a
deposit up by operation id, ``close_account`` (destructive), and ``open_branch``, after
which the server lists one tool more (``branch_hours``). Every call is logged in
``calls`` with the operation id it carried in ``_meta`` and, over HTTP, its
``Idempotency-Key`` header. ``pause_after`` holds the answer back after the effect, the
first time an operation id comes, so a test can kill a process while the effect is done
and its answer not yet sent (and a second attempt answers at once).
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from brainhands.hands.mcp.connection import OPERATION_ID_KEY

SCHEMA = """
create table if not exists calls (tool text, operation_id text, idempotency_key text);
create table if not exists limits (account text primary key, amount integer);
create table if not exists deposits (operation_id text, account text, amount integer);
create table if not exists closures (operation_id text, account text);
"""


def open_ledger(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, timeout=10)
    db.execute("pragma journal_mode=wal")
    db.executescript(SCHEMA)
    return db


def build(path: str) -> MCPServer:
    server = MCPServer("bank")
    db = open_ledger(path)

    def log_call(tool: str, ctx: Context) -> str | None:
        meta = ctx.request_context.meta or {}
        operation_id = meta.get(OPERATION_ID_KEY)
        key = (ctx.headers or {}).get("idempotency-key")
        db.execute("insert into calls values (?, ?, ?)", (tool, operation_id, key))
        return operation_id

    async def hold(operation_id: str | None, pause: float) -> None:
        """Wait ``pause`` seconds if this is the first call of ``operation_id``."""
        (calls,) = db.execute(
            "select count(*) from calls where operation_id = ?", (operation_id,)
        ).fetchone()
        if calls == 1:
            await asyncio.sleep(pause)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def balance(account: str, ctx: Context) -> dict[str, Any]:
        """The sum of an account's deposits."""
        log_call("balance", ctx)
        row = db.execute(
            "select coalesce(sum(amount), 0) from deposits where account = ?", (account,)
        )
        return {"account": account, "balance": row.fetchone()[0]}

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=True))
    async def set_limit(account: str, amount: int, ctx: Context, pause_after: float = 0) -> str:
        """Set an account's limit (the same call twice leaves the same limit)."""
        operation_id = log_call("set_limit", ctx)
        db.execute("insert or replace into limits values (?, ?)", (account, amount))
        await hold(operation_id, pause_after)
        return f"limit of {account} is {amount}"

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def deposit(account: str, amount: int, ctx: Context, pause_after: float = 0) -> str:
        """Add money to an account (each call adds: this server does not dedupe)."""
        operation_id = log_call("deposit", ctx)
        db.execute("insert into deposits values (?, ?, ?)", (operation_id, account, amount))
        await hold(operation_id, pause_after)
        return f"deposited {amount} to {account}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def find_deposit(operation_id: str, ctx: Context) -> dict[str, Any]:
        """Whether the deposit of an operation id was made."""
        log_call("find_deposit", ctx)
        row = db.execute(
            "select account, amount from deposits where operation_id = ?", (operation_id,)
        ).fetchone()
        if row is None:
            return {"found": False}
        return {"found": True, "result": f"deposited {row[1]} to {row[0]}"}

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    async def close_account(account: str, ctx: Context, pause_after: float = 0) -> str:
        """Close an account for good."""
        if account == "frozen":
            raise ValueError("a frozen account cannot be closed")
        operation_id = log_call("close_account", ctx)
        db.execute("insert into closures values (?, ?)", (operation_id, account))
        await hold(operation_id, pause_after)
        return f"closed {account}"

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
    async def open_branch() -> str:
        """Open the branch: a tool more (``branch_hours``) from now on."""

        def branch_hours() -> str:
            """When the branch is open."""
            return "9 to 5"

        if "branch_hours" not in {t.name for t in await server.list_tools()}:
            server.add_tool(branch_hours, annotations=ToolAnnotations(read_only_hint=True))
        return "open"

    return server


def main() -> None:
    path, transport, *rest = sys.argv[1:]
    server = build(path)
    if transport == "http":
        asyncio.run(server.run_streamable_http_async(host="127.0.0.1", port=int(rest[0])))
    else:
        asyncio.run(server.run_stdio_async())


if __name__ == "__main__":
    main()
