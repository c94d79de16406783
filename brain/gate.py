"""How many session passes a Brain runs at once, and which waiting pass goes next.

A Brain receives from two queues per compatibility key, wake-ups and tool results, each with
a prefetch of its own. Both kinds of pass then share one ``PassGate`` of ``concurrency``
slots: the store, the model and the event loop are shared, so the slots bound the work in
flight, and a freed slot goes to a waiting result before any waiting wake-up. A burst of new
sessions therefore delays a result by at most the passes already running, never by the
backlog behind them; running sessions finish first, which also frees their memory first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class PassGate:
    """``slots`` passes at once; urgent waiters (results) are let in before the others."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("a gate needs at least one slot")
        self._free = slots
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._others: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Passes waiting for a slot."""
        return len(self._urgent) + len(self._others)

    @contextlib.asynccontextmanager
    async def slot(self, *, urgent: bool) -> AsyncIterator[None]:
        """Hold a slot for the body; wait for one first if none is free."""
        if self._free > 0 and not self.waiting:
            self._free -= 1
        else:
            line = self._urgent if urgent else self._others
            turn = asyncio.get_running_loop().create_future()
            line.append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._release()  # handed a slot just as it was cancelled: pass it on
                else:
                    line.remove(turn)
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        for line in (self._urgent, self._others):
            while line:
                turn = line.popleft()
                if not turn.done():
                    turn.set_result(None)
                    return
        self._free += 1
