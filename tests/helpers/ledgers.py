"""The external ledgers of the hosted agents' tools (``tests.helpers.hosted_agent``,
``tests.helpers.hosted_oai_agent``, ``tests.helpers.hosted_graph``,
``tests.helpers.hosted_as_agent``): SQLite files in ``HOSTED_LEDGERS`` (a folder), one per
tool, one row per effect under the call's operation id."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from brainhands import tool_context
from brainhands.shared.tools import QueryAnswer, ToolContextLike

LEDGERS = Path(os.environ.get("HOSTED_LEDGERS", "."))


def effects(tool: str) -> list[tuple[str, str]]:
    """The ledger of ``tool``: (operation id, what) per effect, in order."""
    path = LEDGERS / f"{tool}.db"
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(path)) as db:
        return list(db.execute("select operation_id, what from effects order by id"))


def make_effect(tool: str, what: str) -> None:
    with contextlib.closing(sqlite3.connect(LEDGERS / f"{tool}.db", timeout=10)) as db, db:
        db.execute(
            "create table if not exists effects"
            " (id integer primary key, operation_id text, what text)"
        )
        db.execute(
            "insert into effects (operation_id, what) values (?, ?)",
            (tool_context().operation_id, what),
        )


async def recorded(arguments: object, ctx: ToolContextLike) -> QueryAnswer:
    """Did the ``record`` call of ``ctx.operation_id`` happen?"""
    mine = [what for op, what in effects("record") if op == ctx.operation_id]
    return QueryAnswer(bool(mine), f"recorded {mine[0]}" if mine else None)
