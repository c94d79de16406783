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


async def test_while_results_run_wake_ups_hold_at_most_half_the_slots_then_all_again() -> None:
    gate = PassGate(4)
    running: list[str] = []
    done = {name: asyncio.Event() for name in ("result", "w1", "w2", "w3", "w4", "w5")}

    async def a_pass(name: str, urgent: bool) -> None:
        async with gate.slot(urgent=urgent):
            running.append(name)
            await done[name].wait()
            running.remove(name)

    tasks = [asyncio.create_task(a_pass("result", True))]
    for n in range(1, 6):
        tasks.append(asyncio.create_task(a_pass(f"w{n}", False)))
    await asyncio.sleep(0)
    # A result runs: wake-ups get half the slots, though a third is free.
    assert running == ["result", "w1", "w2"] and gate.waiting == 3
    done["w1"].set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert running == ["result", "w2", "w3"]  # one out, one in: still two
    done["result"].set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sorted(running) == ["w2", "w3", "w4", "w5"]  # no result left: every slot
    for event in done.values():
        event.set()
    await asyncio.gather(*tasks)
    assert gate.waiting == 0


async def test_a_slot_wake_ups_leave_free_is_there_for_the_next_result() -> None:
    gate = PassGate(4)
    running: list[str] = []
    done: dict[str, asyncio.Event] = {}

    def start(name: str, urgent: bool) -> asyncio.Task[None]:
        done[name] = asyncio.Event()

        async def a_pass() -> None:
            async with gate.slot(urgent=urgent):
                running.append(name)
                await done[name].wait()
                running.remove(name)

        return asyncio.create_task(a_pass())

    async def settle() -> None:
        for _ in range(3):
            await asyncio.sleep(0)

    tasks = [start(f"w{n}", False) for n in range(1, 6)]
    await settle()
    assert running == ["w1", "w2", "w3", "w4"]  # no result in sight: every slot
    tasks.append(start("r1", True))
    await settle()
    done["w1"].set()
    await settle()
    assert running == ["w2", "w3", "w4", "r1"]  # the freed slot went to the result
    done["w2"].set()
    await settle()
    assert running == ["w3", "w4", "r1"]  # w5 waits: wake-ups are at half the slots
    tasks.append(start("r2", True))
    await settle()
    assert running == ["w3", "w4", "r1", "r2"]  # ... so the next result gets in at once
    for event in done.values():
        event.set()
    await asyncio.gather(*tasks)
    assert gate.waiting == 0


def test_a_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        PassGate(0)
