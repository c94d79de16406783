"""The external ledgers of the hosted agents' tools (``tests.helpers.hosted_agent``,
``tests.helpers.hosted_oai_agent``, ``tests.helpers.hosted_graph``,
``tests.helpers.hosted_as_agent``) and of the limited tools (``tests.helpers.limited_tools``):
SQLite files in ``HOSTED_LEDGERS`` (a folder), one per tool, one row per effect (or call)
under the call's operation id."""

from __future__ import annotations

import bisect
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


def note_call(tool: str, operation_id: str, started: float, ended: float | None) -> None:
    """Record at ``tool``'s ledger a call of ``operation_id`` as the external system saw it:
    when it began and (None: not yet) when it ended, by the machine's clock."""
    with contextlib.closing(sqlite3.connect(LEDGERS / f"{tool}.db", timeout=10)) as db, db:
        db.execute(
            "create table if not exists calls"
            " (id integer primary key, operation_id text, started real, ended real)"
        )
        if ended is None:
            db.execute(
                "insert into calls (operation_id, started) values (?, ?)", (operation_id, started)
            )
        else:
            db.execute(
                "update calls set ended = ? where operation_id = ? and started = ?",
                (ended, operation_id, started),
            )


def calls(tool: str) -> list[tuple[str, float, float | None]]:
    """The calls ``tool``'s ledger saw: (operation id, began, ended or None), in order."""
    path = LEDGERS / f"{tool}.db"
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(path, timeout=10)) as db:
        return list(db.execute("select operation_id, started, ended from calls order by id"))


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of ``spans`` (began, ended) that overlap at any moment."""
    edges = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans])
    running = most = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        running += step
        most = max(most, running)
    return most


def most_in_a_second(starts: list[float]) -> int:
    """The most of ``starts`` within any one-second window [t, t + 1)."""
    ordered = sorted(starts)
    return max((bisect.bisect_left(ordered, t + 1.0) - i for i, t in enumerate(ordered)), default=0)
