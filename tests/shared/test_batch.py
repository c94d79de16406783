"""``Batcher``: calls ready together share one flush, each answered on its own."""

from __future__ import annotations

import asyncio

import pytest

from brainhands.shared.batch import Batcher

pytestmark = pytest.mark.timeout(5)


class Recorder:
    """A flush that records its batches and holds each until ``release`` is set."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def flush(self, items: list[int]) -> list[int | BaseException]:
        self.batches.append(list(items))
        await self.release.wait()
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]


async def test_a_lone_call_is_flushed_at_once_alone() -> None:
    recorder = Recorder()
    batcher: Batcher[int, int] = Batcher(recorder.flush)
    assert await batcher(4) == 40
    assert recorder.batches == [[4]]


async def test_calls_made_while_a_flush_runs_share_the_next_one() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher: Batcher[int, int] = Batcher(recorder.flush)
    first = asyncio.create_task(batcher(2))
    await asyncio.sleep(0)  # the first flush is on its way, holding
    rest = [asyncio.create_task(batcher(i)) for i in (8, 4, 6)]
    await asyncio.sleep(0)
    recorder.release.set()
    assert await asyncio.gather(first, *rest) == [20, 80, 40, 60]
    assert recorder.batches == [[2], [8, 4, 6]]


async def test_each_item_gets_its_own_error_and_the_others_their_values() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher: Batcher[int, int] = Batcher(recorder.flush)
    first = asyncio.create_task(batcher(0))
    await asyncio.sleep(0)
    odd, even = asyncio.create_task(batcher(3)), asyncio.create_task(batcher(2))
    await asyncio.sleep(0)
    recorder.release.set()
    assert await first == 0
    with pytest.raises(ValueError, match="odd 3"):
        await odd
    assert await even == 20


async def test_a_failed_flush_fails_every_call_of_its_batch_only() -> None:
    calls: list[list[str]] = []

    async def flush(items: list[str]) -> list[str]:
        calls.append(items)
        await asyncio.sleep(0.01)
        if "boom" in items:
            raise ConnectionError("service gone")
        return [item.upper() for item in items]

    batcher: Batcher[str, str] = Batcher(flush)
    first = asyncio.create_task(batcher("a"))
    await asyncio.sleep(0)
    doomed = [asyncio.create_task(batcher(x)) for x in ("b", "boom")]
    results = await asyncio.gather(first, *doomed, return_exceptions=True)
    assert results[0] == "A"
    assert all(isinstance(r, ConnectionError) for r in results[1:])
    assert await batcher("c") == "C"  # the batcher goes on


async def test_batches_are_bounded_and_sorted() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher: Batcher[int, int] = Batcher(recorder.flush, max_batch=3, order=lambda i: f"{i:03d}")
    first = asyncio.create_task(batcher(100))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(batcher(i)) for i in (8, 6, 4, 2, 0)]
    await asyncio.sleep(0)
    recorder.release.set()
    await asyncio.gather(first, *rest)
    assert recorder.batches == [[100], [4, 6, 8], [0, 2]]


async def test_a_cancelled_caller_leaves_its_item_in_the_flush_the_others_share() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher: Batcher[int, int] = Batcher(recorder.flush)
    first = asyncio.create_task(batcher(0))
    await asyncio.sleep(0)
    quitter, stayer = asyncio.create_task(batcher(2)), asyncio.create_task(batcher(4))
    await asyncio.sleep(0)
    quitter.cancel()
    await asyncio.sleep(0)
    recorder.release.set()
    assert await first == 0
    assert await stayer == 40
    assert quitter.cancelled()
    assert recorder.batches == [[0], [2, 4]]


def test_a_batch_must_hold_at_least_one_item() -> None:
    async def flush(items: list[int]) -> list[int]:
        return items

    with pytest.raises(ValueError, match="max_batch"):
        Batcher(flush, max_batch=0)
