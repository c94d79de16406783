"""Brain worker processes against real services, killed at the worst moments."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import pytest

from brainhands.shared.messages import SessionWake
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_a_submission_is_run_by_a_brain_process(brains: BrainHarness) -> None:
    brains.start_brain()
    await brains.submit("steps", {"x": 1})

    record = await brains.answer()

    assert record.status == "answered"
    assert record.answer == {"state": {"from": "one", "then": "two"}, "input": {"x": 1}}


@pytest.mark.chaos
async def test_a_sleeping_task_survives_its_brain_and_wakes_on_time(
    brains: BrainHarness,
) -> None:
    brains.start_brain()
    brains.start_brain()
    await eventually(lambda: all('"consuming"' in brains.log(n) for n in (0, 1)), what="ready")
    await brains.submit("napper", {"seconds": 2})
    started = time.time()

    async def asleep() -> bool:
        state = await brains.store.load("s1")
        return any(t.status == "sleeping" for t in state.open_tasks)

    await eventually(asleep, what="the task to fall asleep")

    # The Brain that put it to sleep keeps its timer in memory: kill it with its timer. Its
    # log line is written after the commit the store already shows, so wait for it too.
    def sleepers() -> list[int]:
        return [n for n in (0, 1) if '"event": "advanced"' in brains.log(n)]

    await eventually(lambda: bool(sleepers()), what="the sleeping Brain's log line")
    for n in sleepers():
        brains.processes[n].send_signal(signal.SIGKILL)
        brains.processes[n].wait()
    if all(proc.poll() is not None for proc in brains.processes):
        brains.start_brain()  # both had advanced it: a fresh Brain has no timer either

    record = await brains.answer(within=30)
    woke_at = record.answer["woke_at"]
    assert started + 2 <= woke_at <= started + 2 + brains.sweeper_period + 1.5
    assert (await brains.store.status())["tasks"] == 1  # finished once, by one task


@pytest.mark.chaos
@pytest.mark.parametrize("commit", [1, 2, 3, 5, 8])
async def test_parent_and_children_survive_a_brain_killed_after_any_commit(
    brains: BrainHarness, commit: int
) -> None:
    brains.start_brain(die_at_commit=commit)
    specs = [{"n": n, "sleep": 0.2 if n % 2 else 0} for n in range(5)]
    await brains.submit("parent", {"children": specs})
    await eventually(
        lambda: brains.processes[0].poll() is not None,
        within=30,
        what=f"the brain to die at commit {commit}",
    )
    brains.start_brain()

    record = await brains.answer(within=60)

    assert record.answer == [["succeeded", n * 10] for n in range(5)]
    assert (await brains.store.status())["tasks"] == 6


@pytest.mark.chaos
@pytest.mark.parametrize("commit", [1, 2, 3])
async def test_a_quorum_is_met_once_across_a_brain_killed_after_any_commit(
    brains: BrainHarness, commit: int
) -> None:
    brains.start_brain(die_at_commit=commit)
    specs = [{"n": n, "sleep": 60 if n % 2 else 0} for n in range(4)]
    await brains.submit("parent", {"children": specs, "join": "quorum", "k": 2})
    await eventually(
        lambda: brains.processes[0].poll() is not None,
        within=30,
        what=f"the brain to die at commit {commit}",
    )
    brains.start_brain()

    record = await brains.answer(within=60)

    # The two quick children met it; the sleepers were stopped, not waited for (60 s).
    assert [outcome for outcome, _ in record.answer] == ["succeeded", "cancelled"] * 2
    assert (await brains.store.status())["tasks"] == 5


@pytest.mark.chaos
@pytest.mark.parametrize("commit", [2, 4])
async def test_a_phase_whose_result_was_never_committed_runs_again(
    brains: BrainHarness, commit: int
) -> None:
    brains.start_brain(die_at_commit=commit, die="before")
    await brains.submit("steps", {"x": 3})
    await eventually(lambda: brains.processes[0].poll() is not None, within=30, what="death")
    brains.start_brain()

    record = await brains.answer(within=30)

    assert record.answer == {"state": {"from": "one", "then": "two"}, "input": {"x": 3}}
    state = await brains.store.load("s1")
    assert state.documents["log"].body == ["one", "two"]  # each phase applied once


async def test_a_phase_that_always_fails_is_given_up_and_others_are_served(
    brains: BrainHarness,
) -> None:
    brains.start_brain()
    await brains.submit("broken", {}, session_id="bad")
    await brains.submit("steps", {"x": 4}, session_id="good")

    bad = await brains.answer(session_id="bad")
    good = await brains.answer(session_id="good")

    assert bad.status == "failed" and "always fails" in (bad.error or "")
    assert good.status == "answered"


async def test_the_same_request_three_times_at_once_is_one_run(brains: BrainHarness) -> None:
    brains.start_brain()
    receipts = await asyncio.gather(*(brains.submit("steps", {"x": 5}) for _ in range(3)))

    record = await brains.answer()

    assert sum(r.created for r in receipts) == 1
    assert record.status == "answered"
    assert (await brains.store.status())["tasks"] == 1


@pytest.mark.chaos
async def test_a_lost_wake_up_is_found_by_the_sweeper(brains: BrainHarness) -> None:
    # No Brain runs while the wake-up is published, and the queue is purged: it is lost.
    await brains.submit("steps", {"x": 6})
    await brains.env.brain_queue("v1")
    from brainhands.shared.relay import OutboxRelay

    await OutboxRelay(brains.store, brains.env.broker).drain_once()
    await brains.env.purge(brains.env.topology.brain_queue("v1"))
    brains.start_brain()

    record = await brains.answer(within=20)

    assert record.status == "answered"
    assert '"reason": "sweeper"' in brains.log(0) or "swept" in brains.log(0)


async def test_a_lease_handed_over_is_claimed_by_the_next_passes_first_commit(
    brains: BrainHarness,
) -> None:
    brains.start_brain()
    await brains.submit("napper", {"seconds": 1})

    record = await brains.answer(within=30)

    assert record.status == "answered"
    # A pass logs after its commit: the answer can be read before the last pass's line is written.
    await eventually(lambda: len(passes_of(brains)) == 2, what="the timer's pass logged")
    passes = passes_of(brains)
    # The first pass found the lease never held: it claimed the fence as it took the lease.
    # The timer's pass took it from a holder that let go normally: no claim of its own, the
    # first commit's guard raised the fence.
    assert [p["claim"] for p in passes] == ["acquire", "first_commit"]
    assert passes[-1]["commits"] >= 1
    assert (await brains.store.load("s1")).session.fence == 2

    # Two stray wake-ups: the first pass is handed over and commits nothing, so its token
    # never reaches the store and it does not hand over in turn: the next one claims at once.
    for n in (3, 4):
        wake = SessionWake(session_id="s1", compat="v1", reason="stray")
        await brains.env.broker.publish(wake, brains.env.topology.brain_queue("v1"))
        await eventually(lambda n=n: len(passes_of(brains)) == n, what=f"pass {n}")
    assert [p["claim"] for p in passes_of(brains)[2:]] == ["none", "acquire"]
    assert (await brains.store.load("s1")).session.fence == 4


def passes_of(brains: BrainHarness) -> list[dict[str, Any]]:
    """The ``advanced`` log records of Brain 0's passes over session s1."""
    return [
        json.loads(line)
        for line in brains.log(0).splitlines()
        if '"event": "advanced"' in line and '"session_id": "s1"' in line
    ]
