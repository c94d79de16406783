"""How many session passes a Brain runs at once, and which waiting pass goes next.

A Brain receives from two queues per compatibility key, wake-ups and tool results, each with
a prefetch of its own. Both kinds of pass then share one ``PassGate`` of ``concurrency``
slots: the store, the model and the event loop are shared, so the slots bound the work in
flight, and a freed slot goes to a waiting result before any waiting wake-up. A burst of new
sessions therefore delays a result by at most the passes already running, never by the
backlog behind them; running sessions finish first, which also frees their memory first.

While results run or wait, wake-ups hold at most half the slots (``RESULTS_SHARE``): every
pass in flight shares the store's batches and the event loop, so a result pass is as slow as
the work beside it, and a burst of new sessions would otherwise keep every slot it can get.
Measured by ``bench.roundtrip`` (1,000 sessions at once, seven interleaved pairs of runs):
model committed to result applied p99 369-479 ms instead of 430-741, at a median of 91
calls/s instead of 90. With no result in sight, wake-ups take every slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

RESULTS_SHARE = 0.5
"""The share of the slots wake-ups leave to results while any run or wait."""


class PassGate:
    """``slots`` passes at once; urgent waiters (results) are let in before the others,
    which hold at most ``slots - reserve`` slots while urgent passes run or wait."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("a gate needs at least one slot")
        self._free = slots
        self._others_cap = max(1, slots - int(slots * RESULTS_SHARE))
        """How many slots the others may hold while urgent passes run or wait."""
        self._slots = slots
        self._urgent_in = 0
        self._others_in = 0
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._others: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Passes waiting for a slot."""
        return len(self._urgent) + len(self._others)

    @contextlib.asynccontextmanager
    async def slot(self, *, urgent: bool) -> AsyncIterator[None]:
        """Hold a slot for the body; wait for one first if none is free."""
        first = not (self._urgent if urgent else self._others)  # nobody of its kind waits
        if self._free > 0 and first and (urgent or self._may_admit_other()):
            self._take(urgent)
        else:
            line = self._urgent if urgent else self._others
            turn = asyncio.get_running_loop().create_future()
            line.append(turn)
            try:
                await turn  # the slot is taken for it (``_admit``) before it is woken
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._release(urgent)  # handed a slot just as it was cancelled: pass it on
                else:
                    line.remove(turn)
                raise
        try:
            yield
        finally:
            self._release(urgent)

    def _may_admit_other(self) -> bool:
        if self._urgent:
            return False
        cap = self._others_cap if self._urgent_in else self._slots
        return self._others_in < cap

    def _take(self, urgent: bool) -> None:
        self._free -= 1
        if urgent:
            self._urgent_in += 1
        else:
            self._others_in += 1

    def _release(self, urgent: bool) -> None:
        self._free += 1
        if urgent:
            self._urgent_in -= 1
        else:
            self._others_in -= 1
        self._admit()

    def _admit(self) -> None:
        """Hand the free slots to the waiters who may have them, urgent ones first (the last
        urgent pass to leave lifts the others' cap: several may get in at once)."""
        while self._free > 0:
            if (turn := _next(self._urgent)) is not None:
                self._take(urgent=True)
            elif self._may_admit_other() and (turn := _next(self._others)) is not None:
                self._take(urgent=False)
            else:
                return
            turn.set_result(None)


def _next(line: deque[asyncio.Future[None]]) -> asyncio.Future[None] | None:
    """The first waiter of ``line`` still waiting, taken out of it."""
    while line:
        turn = line.popleft()
        if not turn.done():
            return turn
    return None
