"""A task kind that records each run at an external ledger, for the schedules' chaos case:
the SQLite file ``TICK_LEDGER`` gets one row per run, with the run's session (a schedule's
tick: ``<schedule>@<tick>``)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Any

from brainhands.brain import Finish, Next, PhaseContext, TaskKind, TaskRegistry, TaskView

registry = TaskRegistry()

tick = registry.add(TaskKind("tick"))


def ledger(path: str) -> list[str]:
    """The sessions recorded at the ledger ``path``, one per run, in order."""
    if not os.path.exists(path):
        return []
    with contextlib.closing(sqlite3.connect(path, timeout=10)) as db:
        return [row[0] for row in db.execute("select session_id from runs order by id")]


@tick.phase("record")
async def record(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    with contextlib.closing(sqlite3.connect(os.environ["TICK_LEDGER"], timeout=10)) as db, db:
        db.execute("create table if not exists runs (id integer primary key, session_id text)")
        db.execute("insert into runs (session_id) values (?)", (task.session_id,))
    return Finish({"recorded": task.session_id})
