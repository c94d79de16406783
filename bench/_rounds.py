"""The rounds in which a benchmark's variants take turns, so that machine noise (and the
warmth of caches) hits them alike: each round every variant does its share, in an order that
rotates from round to round, with garbage collected before each stint."""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


def shares(total: int, rounds: int) -> list[int]:
    """``total`` split into ``rounds`` shares that differ by one at most, larger first."""
    return [total // rounds + (1 if r < total % rounds else 0) for r in range(rounds)]


def rotated(items: Sequence[T], r: int) -> list[T]:
    """The order of round ``r``: ``items`` shifted by ``r``, so each goes first in turn."""
    shift = r % len(items)
    return [*items[shift:], *items[:shift]]


async def timed(step: Callable[[], Awaitable[object]], count: int, samples: list[float]) -> float:
    """Await ``step()`` ``count`` times, appending each call's seconds to ``samples``;
    return the seconds of the whole stint."""
    perf = time.perf_counter
    started = perf()
    for _ in range(count):
        t0 = perf()
        await step()
        samples.append(perf() - t0)
    return perf() - started


class Timed(Protocol):
    """A variant measured one ``step`` a sample."""

    samples: list[float]
    elapsed: float
    """Seconds of all its measured stints together."""

    def step(self) -> Awaitable[object]: ...


async def run_rounds(variants: Sequence[Timed], n: int, warmup: int, rounds: int) -> None:
    """Warm every variant up, then take turns: each round every variant does its share of
    ``n`` steps, the order rotating, garbage collected before each stint."""
    for variant in variants:
        for _ in range(warmup):
            await variant.step()
    for r, share in enumerate(shares(n, rounds)):
        for variant in rotated(variants, r):
            gc.collect()
            variant.elapsed += await timed(variant.step, share, variant.samples)
