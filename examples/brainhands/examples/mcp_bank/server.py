"""The bank: an MCP server written with the ``mcp`` SDK's server API, whose every deposit
is a row of its own SQLite ledger, the file ``BANK_LEDGER`` names.

    BANK_LEDGER=bank.db python -m brainhands.examples.mcp_bank.server   # over stdio

A Hands configured with ``mcp.json`` starts it so, and reads each tool's replay policy
from its annotations (the server is trusted there):

- ``balance`` is read-only: ``safe``, run again freely;
- ``deposit`` adds (not idempotent, not destructive): ``query``, because the file names
  ``find_deposit`` as its lookup, so a call whose answer was lost is asked about, not
  guessed at;
- ``close_account`` is destructive: ``unsafe``, and its calls wait for approval.

A deposit also dedupes on the operation id the Hands sends in ``_meta`` (the same on every
attempt of one call): a call that comes again -- sent by a Hands that took over an
operation whose holder had stalled -- gets the first one's receipt and adds nothing.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from brainhands.hands.mcp.connection import OPERATION_ID_KEY

SCHEMA = """
create table if not exists deposits (
    id integer primary key,
    operation_id text unique,  -- null for a caller that sends none: nothing to dedupe on
    account text not null,
    amount integer not null
);
create table if not exists closures (account text primary key);
"""


def open_ledger(path: str) -> sqlite3.Connection:
    """The ledger at ``path`` (created if missing), in autocommit: each statement is one
    transaction, so a deposit is either wholly in the file or not at all."""
    db = sqlite3.connect(path, isolation_level=None, timeout=10)
    db.execute("pragma journal_mode=wal")  # the server writes while others read
    db.executescript(SCHEMA)
    return db


def receipt(row: tuple[Any, ...]) -> dict[str, Any]:
    """A deposit's answer, the same from ``deposit`` and from ``find_deposit``: the model
    reads one outcome however the Hands learned it."""
    deposit, account, amount = row
    return {"deposit": deposit, "account": account, "amount": amount}


def sent_operation_id(ctx: Context) -> str | None:
    """The operation id the Hands sent with this call, if the caller is a Hands."""
    meta: dict[str, Any] = dict(ctx.request_context.meta or {})
    key = meta.get(OPERATION_ID_KEY)
    return key if isinstance(key, str) else None


def build(path: str) -> MCPServer:
    """The bank's server, keeping its ledger at ``path``."""
    server = MCPServer("bank")
    db = open_ledger(path)

    def closed(account: str) -> bool:
        found = db.execute("select 1 from closures where account = ?", (account,)).fetchone()
        return found is not None

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def balance(account: str) -> dict[str, Any]:
        """The sum of an account's deposits, and whether it is closed."""
        (total,) = db.execute(
            "select coalesce(sum(amount), 0) from deposits where account = ?", (account,)
        ).fetchone()
        return {"account": account, "balance": total, "closed": closed(account)}

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def deposit(
        account: str, amount: Annotated[int, Field(gt=0)], ctx: Context
    ) -> dict[str, Any]:
        """Add ``amount`` to an open account; returns the deposit's receipt."""
        if closed(account):
            raise ToolError(f"account {account} is closed")  # the model reads why
        key = sent_operation_id(ctx)
        made = db.execute(
            "insert into deposits (operation_id, account, amount) values (?, ?, ?)"
            " on conflict (operation_id) do nothing returning id, account, amount",
            (key, account, amount),
        ).fetchone()
        if made is None:  # this operation's deposit was made before: answer as then
            made = db.execute(
                "select id, account, amount from deposits where operation_id = ?", (key,)
            ).fetchone()
        return receipt(made)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def find_deposit(operation_id: str) -> dict[str, Any]:
        """Whether the deposit of an operation id was made (the lookup a Hands asks)."""
        row = db.execute(
            "select id, account, amount from deposits where operation_id = ?", (operation_id,)
        ).fetchone()
        return {"found": True, "result": receipt(row)} if row else {"found": False}

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    async def close_account(account: str) -> str:
        """Close an account for good: it takes no deposit after."""
        db.execute("insert into closures values (?) on conflict (account) do nothing", (account,))
        return f"closed {account}"

    return server


def main() -> None:
    path = os.environ.get("BANK_LEDGER")
    if not path:
        sys.exit("BANK_LEDGER is not set: name the SQLite file the bank keeps its ledger in")
    build(path).run()


if __name__ == "__main__":
    main()
