"""The Brain's pass gate: a bound on passes at once, with results let in first."""

from __future__ import annotations

import asyncio

import pytest

from brainhands.brain.gate import PassGate


async def test_no_more_passes_run_at_once_than_the_gate_has_slots() -> None:
    gate = PassGate(2)
    running = peak = 0

    async def a_pass() -> None:
        nonlocal running, peak
        async with gate.slot(urgent=False):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1

    await asyncio.gather(*(a_pass() for _ in range(7)))
    assert peak == 2
    assert gate.waiting == 0


async def test_a_waiting_result_goes_before_wake_ups_that_waited_longer() -> None:
    gate = PassGate(1)
    order: list[str] = []
    release = asyncio.Event()

    async def a_pass(name: str, urgent: bool) -> None:
        async with gate.slot(urgent=urgent):
            order.append(name)
            if name == "running":
                await release.wait()

    tasks = [asyncio.create_task(a_pass("running", False))]
    await asyncio.sleep(0)
    for name, urgent in (("wake-1", False), ("wake-2", False), ("result", True)):
        tasks.append(asyncio.create_task(a_pass(name, urgent)))
        await asyncio.sleep(0)
    assert gate.waiting == 3
    release.set()
    await asyncio.gather(*tasks)
    assert order == ["running", "result", "wake-1", "wake-2"]


async def test_a_waiter_cancelled_in_line_or_on_its_turn_loses_no_slot() -> None:
    gate = PassGate(1)
    holder_done = asyncio.Event()

    async def hold() -> None:
        async with gate.slot(urgent=False):
            await holder_done.wait()

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    in_line = asyncio.create_task(gate.slot(urgent=True).__aenter__())
    on_its_turn = asyncio.create_task(gate.slot(urgent=False).__aenter__())
    await asyncio.sleep(0)
    in_line.cancel()  # still waiting: leaves the line
    await asyncio.gather(in_line, return_exceptions=True)
    holder_done.set()
    await asyncio.sleep(0)  # the holder's exit hands the slot to the next waiter ...
    on_its_turn.cancel()  # ... which is cancelled before it runs: the slot is passed on
    await asyncio.gather(holder, on_its_turn, return_exceptions=True)
    assert gate.waiting == 0
    async with asyncio.timeout(1):  # the one slot is free again
        async with gate.slot(urgent=False):
            pass


def test_a_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        PassGate(0)
