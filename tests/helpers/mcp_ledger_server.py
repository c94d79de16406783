"""A real MCP server for tests, written with the ``mcp`` SDK's server API: a small bank
whose every effect is a row of its own SQLite ledger, the judge of duplicates.

    python -m tests.helpers.mcp_ledger_server LEDGER.db stdio
    python -m tests.helpers.mcp_ledger_server LEDGER.db http PORT

Its tools, one per kind of annotation: ``balance`` (read-only), ``set_limit``
(idempotent), ``deposit`` (additive, no dedupe of its own) with ``find_deposit`` to look a
deposit up by operation id, ``close_account`` (destructive), and ``open_branch``, after
which the server lists one tool more (``branch_hours``); and ``transfer`` (additive),
made a task of the Tasks extension for a client that declares it: the task is a row of the
ledger before the call is answered, its effect and its completion are one transaction
``work_seconds`` later, a task still working when the server starts again is resumed, and
``tasks/cancel`` stops one that has not taken effect. Every call is logged in
``calls`` with the operation id it carried in ``_meta`` and, over HTTP, its
``Idempotency-Key`` header. ``pause_after`` holds the answer back after the effect, the
first time an operation id comes, so a test can kill a process while the effect is done
and its answer not yet sent (and a second attempt answers at once).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolRequestParams, RequestParams, ToolAnnotations
from mcp_types import INVALID_PARAMS

from brainhands.hands.mcp.connection import OPERATION_ID_KEY
from brainhands.hands.mcp.tasks import TASKS

SCHEMA = """
create table if not exists calls (tool text, operation_id text, idempotency_key text);
create table if not exists limits (account text primary key, amount integer);
create table if not exists deposits (operation_id text, account text, amount integer);
create table if not exists closures (operation_id text, account text);
create table if not exists tasks (
    id text primary key, operation_id text, account text, amount integer,
    work_seconds real, status text, result text
);
create table if not exists transfers (
    task_id text, operation_id text, account text, amount integer
);
"""
POLL_MS = 100


def open_ledger(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, timeout=10)
    db.execute("pragma journal_mode=wal")
    db.executescript(SCHEMA)
    return db


class TaskParams(RequestParams):
    task_id: str


class TransferTasks(Extension):
    """``transfer`` calls as tasks, kept in the ledger (module docstring)."""

    identifier = TASKS

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.working: set[asyncio.Task[None]] = set()

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self.get),
            MethodBinding("tasks/cancel", TaskParams, self.cancel),
        )

    def resume(self) -> None:
        """Work again on every task a killed server left working."""
        for (task_id,) in self.db.execute("select id from tasks where status = 'working'"):
            self._work(task_id)

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        capabilities = ctx.session.client_capabilities
        declared = bool(
            capabilities and capabilities.extensions and TASKS in capabilities.extensions
        )
        if params.name != "transfer" or not declared:
            return await call_next(ctx)
        args = params.arguments or {}
        operation_id = (params.meta or {}).get(OPERATION_ID_KEY)
        self.db.execute("insert into calls values (?, ?, ?)", ("transfer", operation_id, None))
        task_id = f"t-{uuid.uuid4().hex[:10]}"
        self.db.execute(
            "insert into tasks values (?, ?, ?, ?, ?, 'working', null)",
            (task_id, operation_id, args["account"], args["amount"], args.get("work_seconds", 0)),
        )
        self._work(task_id)
        return {"resultType": "task", **self._task(task_id)}

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        return {"resultType": "complete", **self._task(params.task_id)}

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> HandlerResult:
        self.db.execute(
            "update tasks set status = 'cancelled' where id = ? and status = 'working'",
            (params.task_id,),
        )
        return {}

    def _task(self, task_id: str) -> dict[str, Any]:
        row = self.db.execute(
            "select status, result from tasks where id = ?", (task_id,)
        ).fetchone()
        if row is None:
            raise MCPError(INVALID_PARAMS, f"no task {task_id!r}")
        status, result = row
        task: dict[str, Any] = {"taskId": task_id, "status": status, "pollIntervalMs": POLL_MS}
        if result is not None:
            task["result"] = json.loads(result)
        return task

    def _work(self, task_id: str) -> None:
        work = asyncio.get_running_loop().create_task(self._run(task_id))
        self.working.add(work)
        work.add_done_callback(self.working.discard)

    async def _run(self, task_id: str) -> None:
        (seconds,) = self.db.execute(
            "select work_seconds from tasks where id = ?", (task_id,)
        ).fetchone()
        await asyncio.sleep(seconds)
        with self.db:  # the effect and the task's completion: one transaction
            self.db.execute("begin immediate")
            row = self.db.execute(
                "select operation_id, account, amount from tasks"
                " where id = ? and status = 'working'",
                (task_id,),
            ).fetchone()
            if row is None:
                return  # cancelled meanwhile
            operation_id, account, amount = row
            self.db.execute(
                "insert into transfers values (?, ?, ?, ?)",
                (task_id, operation_id, account, amount),
            )
            text = f"transferred {amount} to {account}"
            result = {"content": [{"type": "text", "text": text}], "isError": False}
            self.db.execute(
                "update tasks set status = 'completed', result = ? where id = ?",
                (json.dumps(result), task_id),
            )


def log_call(db: sqlite3.Connection, tool: str, ctx: Context) -> str | None:
    """Keep the call (its tool, operation id and idempotency key); its operation id."""
    meta = ctx.request_context.meta or {}
    operation_id = meta.get(OPERATION_ID_KEY)
    key = (ctx.headers or {}).get("idempotency-key")
    db.execute("insert into calls values (?, ?, ?)", (tool, operation_id, key))
    return operation_id


async def hold(db: sqlite3.Connection, operation_id: str | None, pause: float) -> None:
    """Wait ``pause`` seconds if this is the first call of ``operation_id``."""
    (calls,) = db.execute(
        "select count(*) from calls where operation_id = ?", (operation_id,)
    ).fetchone()
    if calls == 1:
        await asyncio.sleep(pause)


def build(path: str) -> tuple[MCPServer, TransferTasks]:
    db = open_ledger(path)
    tasks = TransferTasks(db)
    server = MCPServer("bank", extensions=[tasks])

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def balance(account: str, ctx: Context) -> dict[str, Any]:
        """The sum of an account's deposits."""
        log_call(db, "balance", ctx)
        row = db.execute(
            "select coalesce(sum(amount), 0) from deposits where account = ?", (account,)
        )
        return {"account": account, "balance": row.fetchone()[0]}

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=True))
    async def set_limit(account: str, amount: int, ctx: Context, pause_after: float = 0) -> str:
        """Set an account's limit (the same call twice leaves the same limit)."""
        operation_id = log_call(db, "set_limit", ctx)
        db.execute("insert or replace into limits values (?, ?)", (account, amount))
        await hold(db, operation_id, pause_after)
        return f"limit of {account} is {amount}"

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def deposit(account: str, amount: int, ctx: Context, pause_after: float = 0) -> str:
        """Add money to an account (each call adds: this server does not dedupe)."""
        operation_id = log_call(db, "deposit", ctx)
        db.execute("insert into deposits values (?, ?, ?)", (operation_id, account, amount))
        await hold(db, operation_id, pause_after)
        return f"deposited {amount} to {account}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def find_deposit(operation_id: str, ctx: Context) -> dict[str, Any]:
        """Whether the deposit of an operation id was made."""
        log_call(db, "find_deposit", ctx)
        row = db.execute(
            "select account, amount from deposits where operation_id = ?", (operation_id,)
        ).fetchone()
        if row is None:
            return {"found": False}
        return {"found": True, "result": f"deposited {row[1]} to {row[0]}"}

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def transfer(account: str, amount: int, ctx: Context, work_seconds: float = 0) -> str:
        """Move money to an account, as a task for a client of the Tasks extension."""
        operation_id = log_call(db, "transfer", ctx)
        db.execute("insert into transfers values (null, ?, ?, ?)", (operation_id, account, amount))
        return f"transferred {amount} to {account}"

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    async def close_account(account: str, ctx: Context, pause_after: float = 0) -> str:
        """Close an account for good."""
        if account == "frozen":
            raise ValueError("a frozen account cannot be closed")
        operation_id = log_call(db, "close_account", ctx)
        db.execute("insert into closures values (?, ?)", (operation_id, account))
        await hold(db, operation_id, pause_after)
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

    return server, tasks


def main() -> None:
    path, transport, *rest = sys.argv[1:]
    asyncio.run(serve(path, transport, *rest))


async def serve(path: str, transport: str, *rest: str) -> None:
    server, tasks = build(path)
    tasks.resume()
    if transport == "http":
        await server.run_streamable_http_async(host="127.0.0.1", port=int(rest[0]))
    else:
        await server.run_stdio_async()


if __name__ == "__main__":
    main()
