"""A process SIGKILLed in the middle of a commit leaves all of it or none of it."""

from __future__ import annotations

import asyncio
import random
import signal
from pathlib import Path

import pytest

from brainhands.shared.store import Store
from tests.helpers import commit_victim as victim
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.stores import StoreTarget

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

# Statements of one victim commit: session guard, entries, document, tasks, outbox.
STATEMENTS = 5  # BEGIN is not counted
BATCH = ("s1", "s2", "s3")  # committed at once: one transaction of 3 x 5 statements


def assert_whole_commits(
    state_version: int, entries: int, tasks: int, docs: int, outbox: int
) -> None:
    assert entries == state_version * victim.ENTRIES
    assert tasks == state_version * victim.TASKS
    assert docs == state_version
    assert outbox == state_version * victim.OUTBOX


async def observed(store: Store, session_id: str) -> tuple[int, int, int, int, int]:
    state = await store.load(session_id)
    status = await store.status()
    return (
        state.session.version,
        len(state.entries),
        len(state.open_tasks),
        len(state.documents),
        status["outbox_rows"],
    )


@pytest.mark.parametrize("pause_at", range(1, STATEMENTS + 1))
async def test_kill_between_statements_leaves_nothing(
    store: Store, store_target: StoreTarget, tmp_path: Path, pause_at: int
) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    marker = tmp_path / "marker"
    proc = spawn_module(
        "tests.helpers.commit_victim",
        store_target.url,
        store_target.schema or "",
        "s1",
        str(pause_at),
        str(marker),
        log=tmp_path / "victim.log",
    )
    try:
        await eventually(marker.exists, within=30, what="the victim to pause mid-commit")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert await observed(store, "s1") == (0, 0, 0, 0, 0)


async def test_kill_at_random_moments_leaves_only_whole_commits(
    store: Store, store_target: StoreTarget, tmp_path: Path
) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    rng = random.Random(7)
    for round_ in range(6):
        marker = tmp_path / f"marker{round_}"
        proc = spawn_module(
            "tests.helpers.commit_victim",
            store_target.url,
            store_target.schema or "",
            "s1",
            "0",
            str(marker),
            log=tmp_path / "victim.log",
        )
        try:
            await eventually(marker.exists, within=30, what="the victim's first commit")

            await asyncio.sleep(rng.uniform(0.0, 0.15))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert_whole_commits(*await observed(store, "s1"))
    version = (await store.load("s1")).session.version
    assert version >= 6


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


# Inside the first draft, between the first two drafts, inside the second, before the last
# draft's guard, and after the batch's last statement (before COMMIT).
@pytest.mark.parametrize("pause_at", [1, STATEMENTS, STATEMENTS + 2, 2 * STATEMENTS, 15])
async def test_kill_inside_a_batch_leaves_none_of_its_drafts(
    store: Store, store_target: StoreTarget, tmp_path: Path, pause_at: int
) -> None:
    await claimed(store, BATCH)
    marker = tmp_path / "marker"
    proc = spawn_module(
        "tests.helpers.commit_victim",
        store_target.url,
        store_target.schema or "",
        ",".join(BATCH),
        str(pause_at),
        str(marker),
        log=tmp_path / "victim.log",
    )
    try:
        await eventually(marker.exists, within=30, what="the victim to pause mid-batch")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert await whole_in_each(store, BATCH) == [0, 0, 0]


async def test_kill_at_random_moments_of_batches_leaves_only_whole_commits(
    store: Store, store_target: StoreTarget, tmp_path: Path
) -> None:
    await claimed(store, BATCH)
    rng = random.Random(11)
    for round_ in range(6):
        marker = tmp_path / f"marker{round_}"
        proc = spawn_module(
            "tests.helpers.commit_victim",
            store_target.url,
            store_target.schema or "",
            ",".join(BATCH),
            "0",
            str(marker),
            log=tmp_path / "victim.log",
        )
        try:
            await eventually(marker.exists, within=30, what="the victim's first batch")
            await asyncio.sleep(rng.uniform(0.0, 0.15))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        await whole_in_each(store, BATCH)
    assert min(await whole_in_each(store, BATCH)) >= 6
