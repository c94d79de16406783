"""Batches of calls to one service: what is ready when the previous round trip ends goes
together in the next (DESIGN §3, "Group commit").

A worker runs many passes or tool calls at once, each a sequence of awaited round trips
(a lease, a fence claim, a commit, a release). Each round trip costs this process far more
CPU than the work it carries, so a ``Batcher`` lets the calls of one kind share them: a call
that finds no flush running is flushed at once, with the calls that are ready at the same
moment; calls made while a flush runs wait and go together in the next one. No timer waits
for company, so a lone call is never slowed. A call flushed alone runs in its own task
(starting a task costs more CPU than batching saves a lone call); a batch, in a task of the
batcher's.

The flush function answers each item on its own -- a value, or the exception that item's
caller gets -- so a refused item (a stale fence, a lease held by another) fails alone. If the
flush raises, every caller of that batch gets the error. A waiting caller that is cancelled
stops waiting, but its item stays in the batch: the others' round trip is the same one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from brainhands.shared import metrics

_I = TypeVar("_I")
_O = TypeVar("_O")

MAX_BATCH = 64
"""Items in one flush at most, unless the batcher is given another bound."""

Flush = Callable[[list[_I]], Awaitable[Sequence[_O | BaseException]]]
"""Carries a batch of items in one round trip; returns one outcome per item, in order."""


class Batcher(Generic[_I, _O]):
    """Runs ``flush`` over the items of the calls that are ready together.

    ``order`` sorts a batch (so that batches touching the same rows take their locks in one
    order); ``max_batch`` bounds it. ``what`` names the calls in the
    ``brainhands_batch_calls`` metric (none: not measured).
    """

    def __init__(
        self,
        flush: Flush[_I, _O],
        *,
        max_batch: int = MAX_BATCH,
        order: Callable[[_I], str] | None = None,
        what: str | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self._size = metrics.BATCH_CALLS.labels(what) if what is not None else None
        self._flush = flush
        self._max = max_batch
        self._order = order
        self._waiting: list[tuple[_I, asyncio.Future[_O]]] = []
        self._flushing = False
        """A flush is on its way: calls made now wait for the next one."""
        self._flusher: asyncio.Task[None] | None = None
        """The task flushing the calls that waited, while it runs."""

    async def __call__(self, item: _I) -> _O:
        """``item``'s outcome: its value, or its error raised."""
        done: asyncio.Future[_O] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        if self._flushing:
            return await done
        self._flushing = True
        try:
            await asyncio.sleep(0)  # the calls that are ready too join this one
        except BaseException:
            done.cancel()
            self._flusher = asyncio.create_task(self._flush_all())  # the others still go
            raise
        if len(self._waiting) > 1:
            self._flusher = asyncio.create_task(self._flush_all())
            return await done
        # Alone: flushed in the caller's own task, with no task started for it.
        self._waiting.clear()
        if self._size is not None:
            self._size.observe(1)
        try:
            [outcome] = await self._flush([item])
        finally:
            if self._waiting:  # the calls made meanwhile go next, together
                self._flusher = asyncio.create_task(self._flush_all())
            else:
                self._flushing = False
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def _flush_all(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[: self._max], self._waiting[self._max :]
                if self._order is not None:
                    order = self._order
                    batch.sort(key=lambda pending: order(pending[0]))
                await self._run(batch)
        except BaseException as exc:
            for _, done in self._waiting:  # the loop is going down: nobody waits forever
                settle(done, exc)
            self._waiting.clear()
            raise
        finally:
            self._flusher = None
            self._flushing = False

    async def _run(self, batch: list[tuple[_I, asyncio.Future[_O]]]) -> None:
        if self._size is not None:
            self._size.observe(len(batch))
        try:
            outcomes = await self._flush([item for item, _ in batch])
        except BaseException as exc:
            for _, done in batch:
                settle(done, exc)
            if not isinstance(exc, Exception):
                raise
            return
        if len(outcomes) != len(batch):
            error = RuntimeError(f"a flush of {len(batch)} items answered {len(outcomes)}")
            for _, done in batch:
                settle(done, error)
            return
        for (_, done), outcome in zip(batch, outcomes, strict=True):
            settle(done, outcome)


def settle(done: asyncio.Future[_O], outcome: _O | BaseException) -> None:
    """Hand ``outcome`` to the caller waiting on ``done``: its value, its error, or its
    cancellation; nothing if the caller stopped waiting (the outcome stands regardless)."""
    if done.done():
        return
    if isinstance(outcome, asyncio.CancelledError):
        done.cancel()
    elif isinstance(outcome, BaseException):
        done.set_exception(outcome)
    else:
        done.set_result(outcome)
