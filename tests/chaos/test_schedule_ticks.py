"""A schedule's ticks under sweeper kills: a schedule ticking every second submits a task
kind that records its run at an external ledger (``tests.helpers.ticks``), fired by two
sweeper processes that are SIGKILLed and started again for eight seconds. At the ledger:
one run per tick, no tick twice, no tick left out between the first and the last (every
outage is far shorter than ``BRAINHANDS_SCHEDULE_LATE_AFTER``, so no tick counts as missed)."""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from brainhands.shared.schedules import ScheduleSpec, tick_session_id
from brainhands.shared.store import ScheduleRecord
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.ticks import ledger

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(60)]

CHAOS_SECONDS = 8.0


def sweepers_that_fired(logs: Path) -> list[str]:
    """The sweeper processes (by log) that submitted ticks."""
    return [log.name for log in logs.glob("sweeper*.log") if "schedule_ticked" in log.read_text()]


async def test_each_tick_runs_once_across_sweeper_kills(
    brains: BrainHarness, tmp_path: Path
) -> None:
    book = str(tmp_path / "ticks.db")
    env = brains.settings(TICK_LEDGER=book)
    spawn_module(
        "brainhands",
        "brain",
        "--compat",
        "v1",
        "--tasks",
        "tests.helpers.ticks",
        "--no-sweeper",
        env=env,
        log=tmp_path / "brain.log",
    )
    sweepers: dict[int, subprocess.Popen[bytes]] = {}
    starts = Counter[int]()

    def start_sweeper(n: int) -> None:
        starts[n] += 1
        log = tmp_path / f"sweeper{n}-{starts[n]}.log"
        sweepers[n] = spawn_module("brainhands", "sweeper", env=env, log=log)

    start_sweeper(0)
    start_sweeper(1)
    now = time.time()
    spec = ScheduleSpec(every=1)
    await brains.store.schedules.create(
        ScheduleRecord(
            tenant="acme",
            id="heartbeat",
            agent=None,
            kind="tick",
            input={},
            compat="v1",
            spec=spec,
            missed="skip",
            state="active",
            next_tick_at=spec.next_tick(now),
            last_tick_at=None,
            created_by="test",
            created_at=now,
            updated_by="test",
            updated_at=now,
        )
    )
    # The first tick's run at the ledger: the Brain and a sweeper are up.
    await eventually(lambda: bool(ledger(book)), within=30, what="the first tick's run")
    rng = random.Random(52)
    kills = 0
    deadline = time.monotonic() + CHAOS_SECONDS
    while time.monotonic() < deadline:
        await asyncio.sleep(rng.uniform(0.8, 1.6))
        # Mostly one sweeper (the lease passes to the other), now and then both (nobody
        # fires until one is up again).
        for n in rng.sample([0, 1], rng.choice([1, 1, 1, 2])):
            sweepers[n].kill()
            sweepers[n].wait()
            kills += 1
            start_sweeper(n)

    async def caught_up() -> bool:
        schedule = await brains.store.schedules.get("acme", "heartbeat")
        return (schedule.last_tick_at or 0) >= time.time() - 2

    # The sweepers started last fire the ticks their outage left behind.
    await eventually(caught_up, within=20, what="the sweepers catching up")
    await brains.store.schedules.set_state("acme", "heartbeat", "paused", by="test")
    await asyncio.sleep(1.0)  # a sweep that read the schedule before the pause ends
    paused = await brains.store.schedules.get("acme", "heartbeat")
    assert paused.last_tick_at is not None
    first = spec.next_tick(now)
    expected = [
        f"acme/{tick_session_id('heartbeat', t)}" for t in spec.ticks(first, paused.last_tick_at)
    ]

    async def all_ran() -> bool:
        return set(ledger(book)) >= set(expected)

    await eventually(all_ran, within=20, what=f"the runs of {len(expected)} ticks")
    runs = ledger(book)
    assert [s for s, n in Counter(runs).items() if n > 1] == []  # no tick ran twice
    assert sorted(runs) == sorted(expected)  # every tick ran, none left out, none extra
    assert len(expected) >= CHAOS_SECONDS - 2, f"only {len(expected)} ticks in {CHAOS_SECONDS}s"
    assert kills >= 5
    firing = sweepers_that_fired(tmp_path)
    assert len(firing) >= 2, f"only {firing} fired ticks"  # the lease passed over
    print(f"{len(expected)} ticks, {kills} sweeper kills, fired by {sorted(firing)}")
