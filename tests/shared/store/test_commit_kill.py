"""A process SIGKILLed in the middle of a commit leaves all of it or none of it -- a lone
commit (a transaction, or one statement where the backend chains writes), or a batch of
several sessions' drafts in one transaction (group commit)."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text

from brainhands.shared.store import Store
from tests.helpers import commit_victim as victim
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.stores import StoreTarget

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

# Statements of one victim draft: session guard, entries, document, tasks, outbox (BEGIN is
# not counted) -- or, where the backend chains writes, the one statement they make together,
# and the drafts of a batch (all of one shape) share one pipelined round trip, which the
# server commits at its end.
STATEMENTS = {"Postgres": 1, "Sqlite": 5}
LONE = ("s1",)
BATCH = ("s1", "s2", "s3")  # committed at once: one transaction of three drafts


async def claimed(store: Store, sessions: tuple[str, ...]) -> None:
    for session_id in sessions:
        await store.create_session(session_id, compat="v1")
        await store.claim_session_fence(session_id, 1)


async def whole_in_each(store: Store, sessions: tuple[str, ...]) -> list[int]:
    """Each session's version, having checked that it holds whole commits only."""
    versions = []
    for session_id in sessions:
        state = await store.load(session_id)
        version = state.session.version
        assert len(state.entries) == version * victim.ENTRIES, session_id
        assert len(state.open_tasks) == version * victim.TASKS, session_id
        assert len(state.documents) == version, session_id
        versions.append(version)
    assert (await store.status())["outbox_rows"] == sum(versions) * victim.OUTBOX
    return versions


async def no_transaction_left(store: Store) -> bool:
    """Whether no other PostgreSQL backend of this database is in a transaction: a statement
    whose client was killed after sending it all runs on to its commit, and the checks must
    come after that (always true on SQLite, where the writer was the process itself)."""
    if store.backend.embedded:
        return True
    async with store.backend.snapshot() as conn:
        others = await conn.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
            )
        )
    return others == 0


def spawn_victim(
    store_target: StoreTarget, sessions: tuple[str, ...], pause_at: int, marker: Path
) -> subprocess.Popen[bytes]:
    return spawn_module(
        "tests.helpers.commit_victim",
        store_target.url,
        store_target.schema or "",
        ",".join(sessions),
        str(pause_at),
        str(marker),
        log=marker.with_suffix(".log"),
    )


@pytest.mark.parametrize(
    ("sessions", "draft", "statement"),
    # After each statement of a lone draft; in a batch: inside the first draft, between the
    # first two, inside the second, before the last draft's guard, and after the batch's last
    # statement (before COMMIT). A statement past a draft's last is its last.
    [(LONE, 0, n) for n in range(1, 6)]
    + [(BATCH, 0, 1), (BATCH, 0, 5), (BATCH, 1, 2), (BATCH, 1, 5), (BATCH, 2, 5)],
)
async def test_kill_between_statements_leaves_all_or_nothing(
    store: Store,
    store_target: StoreTarget,
    tmp_path: Path,
    sessions: tuple[str, ...],
    draft: int,
    statement: int,
) -> None:
    await claimed(store, sessions)
    per_draft = STATEMENTS[type(store.backend).__name__]
    in_all = per_draft if store.backend.chains_writes else per_draft * len(sessions)
    pause_at = min(draft * per_draft + min(statement, per_draft), in_all)
    marker = tmp_path / "marker"
    proc = spawn_victim(store_target, sessions, pause_at, marker)
    try:
        await eventually(marker.exists, within=30, what="the victim to pause mid-commit")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # Drafts written by one statement -- a lone one, or a batch of one shape pipelined in one
    # round trip, with no BEGIN around it -- are committed once it has run; anything else
    # is undone with the transaction the kill ended.
    committed = per_draft == 1
    assert await whole_in_each(store, sessions) == [int(committed)] * len(sessions)


@pytest.mark.parametrize("sessions", [LONE, BATCH])
async def test_kill_at_random_moments_leaves_only_whole_commits(
    store: Store, store_target: StoreTarget, tmp_path: Path, sessions: tuple[str, ...]
) -> None:
    await claimed(store, sessions)
    rng = random.Random(7)
    for round_ in range(6):
        marker = tmp_path / f"marker{round_}"
        proc = spawn_victim(store_target, sessions, 0, marker)
        try:
            await eventually(marker.exists, within=30, what="the victim's first commit")
            await asyncio.sleep(rng.uniform(0.0, 0.15))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        await eventually(
            lambda: no_transaction_left(store), within=30, what="the victim's backend to end"
        )
        await whole_in_each(store, sessions)
    assert min(await whole_in_each(store, sessions)) >= 6
