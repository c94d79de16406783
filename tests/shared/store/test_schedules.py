"""The store's schedules, on both backends: kept, listed by tenant, paused, resumed, deleted,
and moved on by one sweeper only when two race (``store.schedules``)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from brainhands.shared.errors import ConflictError, NotFoundError
from brainhands.shared.schedules import ScheduleSpec
from brainhands.shared.store import ScheduleRecord, Store


def a_schedule(tenant: str, schedule_id: str, *, next_tick_at: float = 1000.0) -> ScheduleRecord:
    now = time.time()
    return ScheduleRecord(
        tenant=tenant,
        id=schedule_id,
        agent=None,
        kind="report",
        input={"n": 1},
        compat="v1",
        spec=ScheduleSpec(cron="0 3 * * *", timezone="Europe/Paris"),
        missed="run_one",
        state="active",
        next_tick_at=next_tick_at,
        last_tick_at=None,
        created_by="key:ops",
        created_at=now,
        updated_by="key:ops",
        updated_at=now,
    )


async def test_a_schedule_is_kept_listed_by_tenant_and_deleted(store: Store) -> None:
    kept = a_schedule("acme", "nightly")
    await store.schedules.create(kept)
    await store.schedules.create(a_schedule("acme", "hourly"))
    await store.schedules.create(a_schedule("globex", "nightly"))
    assert await store.schedules.get("acme", "nightly") == kept
    assert [s.id for s in await store.schedules.all("acme")] == ["hourly", "nightly"]
    assert [(s.tenant, s.id) for s in await store.schedules.all()] == [
        ("acme", "hourly"),
        ("acme", "nightly"),
        ("globex", "nightly"),
    ]
    with pytest.raises(ConflictError, match="schedule 'nightly' exists already"):
        await store.schedules.create(a_schedule("acme", "nightly"))
    await store.schedules.delete("acme", "nightly")
    with pytest.raises(NotFoundError):
        await store.schedules.get("acme", "nightly")
    with pytest.raises(NotFoundError):
        await store.schedules.delete("acme", "nightly")
    assert [s.tenant for s in await store.schedules.all()] == ["acme", "globex"]


async def test_a_paused_schedule_is_not_due_and_resumes_from_its_next_tick(store: Store) -> None:
    await store.schedules.create(a_schedule("acme", "nightly", next_tick_at=1000.0))
    assert [s.id for s in await store.schedules.due(1000.0)] == ["nightly"]
    paused = await store.schedules.set_state("acme", "nightly", "paused", by="key:pauser")
    assert (paused.state, paused.updated_by) == ("paused", "key:pauser")
    assert await store.schedules.due(5000.0) == []
    resumed = await store.schedules.set_state(
        "acme", "nightly", "active", by="key:resumer", next_tick_at=9000.0
    )
    assert (resumed.state, resumed.next_tick_at) == ("active", 9000.0)
    assert await store.schedules.due(5000.0) == []
    assert [s.id for s in await store.schedules.due(9000.0)] == ["nightly"]
    with pytest.raises(NotFoundError):
        await store.schedules.set_state("globex", "nightly", "paused", by="key:x")


async def test_of_two_sweepers_that_read_the_same_tick_one_moves_it_on(store: Store) -> None:
    await store.schedules.create(a_schedule("acme", "nightly", next_tick_at=1000.0))
    [first], [second] = await asyncio.gather(
        store.schedules.due(1000.0), store.schedules.due(1000.0)
    )
    won = await asyncio.gather(
        store.schedules.advance(first, next_tick_at=2000.0, last_tick_at=1000.0),
        store.schedules.advance(second, next_tick_at=2500.0, last_tick_at=1000.0),
    )
    assert sorted(won) == [False, True]
    after = await store.schedules.get("acme", "nightly")
    assert after.next_tick_at == (2000.0 if won[0] else 2500.0)
    assert after.last_tick_at == 1000.0


async def test_a_sweep_read_before_a_pause_does_not_move_the_schedule(store: Store) -> None:
    await store.schedules.create(a_schedule("acme", "nightly", next_tick_at=1000.0))
    [read] = await store.schedules.due(1000.0)
    await store.schedules.set_state("acme", "nightly", "paused", by="key:ops")
    assert not await store.schedules.advance(read, next_tick_at=2000.0, last_tick_at=1000.0)
    await store.schedules.set_state("acme", "nightly", "active", by="key:ops", next_tick_at=3000.0)
    stale = dataclasses.replace(read, state="active")
    assert not await store.schedules.advance(stale, next_tick_at=2000.0, last_tick_at=1000.0)
    assert (await store.schedules.get("acme", "nightly")).next_tick_at == 3000.0
