"""A process that commits to a store and can be told to freeze mid-transaction.

    python -m tests.helpers.commit_victim URL SCHEMA SESSIONS PAUSE_AT MARKER

Each commit appends 5 entries, creates 3 tasks, writes 1 document and 3 outbox rows.
SESSIONS is a comma-separated list: one draft each is committed at once, so that several
form one batch (group commit). With PAUSE_AT > 0 the process makes one round of commits
and, right after the PAUSE_AT-th statement of their transaction, writes MARKER and sleeps
(so the test can SIGKILL it there). With PAUSE_AT = 0 it commits rounds in a loop until
killed, touching MARKER after the first.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event

from brainhands.shared.store import Draft, Store

ENTRIES, TASKS, OUTBOX = 5, 3, 3


def build_draft(session_id: str, version: int) -> Draft:
    draft = Draft(session_id, version=version, fence=1)
    for i in range(ENTRIES):
        draft.append_entry("note", {"commit": version, "i": i})
    for _ in range(TASKS):
        draft.add_task(kind="k", kind_version=1, input={"commit": version})
    draft.put_document(f"doc{version}", {"commit": version}, expected_version=None)
    for i in range(OUTBOX):
        draft.add_outbox("q", f"{version}:{i}".encode())
    return draft


def _mark(marker: Path) -> None:
    marker.touch()


async def main(url: str, schema: str, sessions: list[str], pause_at: int, marker: Path) -> None:
    store = await Store.open(url, db_schema=schema or None, upgrade=False)

    async def commit_all(versions: list[int]) -> None:
        drafts = [build_draft(s, v) for s, v in zip(sessions, versions, strict=True)]
        await asyncio.gather(*map(store.commit, drafts))

    if pause_at:
        seen = 0

        def freeze(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            nonlocal seen
            if statement.startswith("BEGIN"):
                return
            seen += 1
            if seen == pause_at:
                marker.write_text("paused")
                time.sleep(120)

        writer = store.backend.writes_on
        event.listen(writer, "after_cursor_execute", freeze)
        await commit_all([0] * len(sessions))
        return
    versions = [(await store.load(s)).session.version for s in sessions]
    while True:
        await commit_all(versions)
        versions = [v + 1 for v in versions]
        _mark(marker)


if __name__ == "__main__":
    url, schema, sessions, pause_at, marker = sys.argv[1:6]
    asyncio.run(main(url, schema, sessions.split(","), int(pause_at), Path(marker)))
