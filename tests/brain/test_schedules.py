"""Firing schedules (``brain.schedules``), on both backends: the due ticks become one
submission each, with its wake-up, in a session of their own; sweepers firing at once
submit each tick once and only one moves the schedule on; after downtime, ``skip`` and
``run_one`` decide what becomes of the missed ticks; a paused schedule submits nothing."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select

from brainhands.brain.schedules import fire_schedules
from brainhands.brain.settings import BrainSettings
from brainhands.shared.config import load_settings
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.schedules import MissedPolicy, ScheduleSpec
from brainhands.shared.store import ScheduleRecord, Store, schema
from brainhands.shared.topology import Topology

TOPOLOGY = Topology("schedules")


async def create(
    store: Store, spec: ScheduleSpec, *, next_tick_at: float, missed: MissedPolicy = "skip"
) -> ScheduleRecord:
    record = ScheduleRecord(
        tenant="acme",
        id="beat",
        agent=None,
        kind="report",
        input={"n": 1},
        compat="v1",
        spec=spec,
        missed=missed,
        state="active",
        next_tick_at=next_tick_at,
        last_tick_at=None,
        created_by="key:ops",
        created_at=0.0,
        updated_by="key:ops",
        updated_at=0.0,
    )
    await store.schedules.create(record)
    return record


async def submitted(store: Store) -> list[tuple[str, str, object, str | None]]:
    """Every submission: session, request id, input, principal; by session."""
    sub = schema.submission
    query = select(sub.c.session_id, sub.c.request_id, sub.c.input, sub.c.principal)
    async with store.backend.snapshot() as conn:
        rows = await conn.execute(query.order_by(sub.c.session_id))
        return [tuple(row) for row in rows]


async def wake_ups(store: Store) -> int:
    async with store.backend.snapshot() as conn:
        return (await conn.execute(select(func.count()).select_from(schema.outbox))).scalar_one()


async def test_each_due_tick_is_one_submission_to_a_session_of_its_own(store: Store) -> None:
    await create(store, ScheduleSpec(every=10), next_tick_at=1000.0)
    assert await fire_schedules(store, TOPOLOGY, now=1025.0) == 3
    assert await submitted(store) == [
        (f"acme/beat@{t}", f"beat@{t}", {"kind": "report", "input": {"n": 1}}, "schedule:beat")
        for t in (1000, 1010, 1020)
    ]
    assert await wake_ups(store) == 3
    moved = await store.schedules.get("acme", "beat")
    assert (moved.next_tick_at, moved.last_tick_at) == (1030.0, 1020.0)
    assert await fire_schedules(store, TOPOLOGY, now=1029.0) == 0  # nothing due yet


async def test_sweepers_firing_at_once_submit_each_tick_once(store: Store) -> None:
    await create(store, ScheduleSpec(every=10), next_tick_at=1000.0)
    fired = await asyncio.gather(*(fire_schedules(store, TOPOLOGY, now=1035.0) for _ in range(4)))
    assert sum(fired) >= 4  # each submits what it read as due; the store keeps one of each
    assert [s for s, *_ in await submitted(store)] == [
        f"acme/beat@{t}" for t in (1000, 1010, 1020, 1030)
    ]
    assert await wake_ups(store) == 4
    assert (await store.schedules.get("acme", "beat")).next_tick_at == 1040.0


@pytest.mark.parametrize(("missed", "ticks"), [("skip", [6000]), ("run_one", [5400, 6000])])
async def test_the_missed_ticks_policy_decides_after_downtime(
    store: Store, missed: MissedPolicy, ticks: list[int]
) -> None:
    # Due at 1200, swept again at 6030: 6000 is on time, 1200 to 5400 were missed.
    await create(store, ScheduleSpec(every=600), next_tick_at=1200.0, missed=missed)
    assert await fire_schedules(store, TOPOLOGY, now=6030.0, late_after=60) == len(ticks)
    assert [s for s, *_ in await submitted(store)] == [f"acme/beat@{t}" for t in ticks]
    assert (await store.schedules.get("acme", "beat")).next_tick_at == 6600.0


async def test_a_paused_schedule_submits_nothing(store: Store) -> None:
    await create(store, ScheduleSpec(every=10), next_tick_at=1000.0)
    await store.schedules.set_state("acme", "beat", "paused", by="key:ops")
    assert await fire_schedules(store, TOPOLOGY, now=1025.0) == 0
    assert await submitted(store) == []


def test_a_bad_late_after_fails_at_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for bad in ("0", "-5", "soon"):
        monkeypatch.setenv("BRAINHANDS_SCHEDULE_LATE_AFTER", bad)
        with pytest.raises(ConfigurationError, match="BRAINHANDS_SCHEDULE_LATE_AFTER"):
            load_settings(BrainSettings)
    monkeypatch.setenv("BRAINHANDS_SCHEDULE_LATE_AFTER", "120")
    assert load_settings(BrainSettings).schedule_late_after == 120.0
