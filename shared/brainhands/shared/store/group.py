"""Group commit: the writes of many callers in one transaction (DESIGN §3, "Group commit").

A Brain runs many passes at once, and each step of a pass ends with a commit of a session's
draft; a Hands worker runs many calls at once, and each ends with the commit of an outcome.
``GroupCommit`` flushes the writes that are ready when the previous flush ends, together: one
transaction, one WAL flush, instead of one each. A write that finds no flush running is
flushed at once, alone: no timer waits for company, so a lone call is never slowed.

In a batch, each write's guard (a session's version and fence, an operation's fence) is
checked on its own, and a refused guard drops only that write: its caller gets the error a
lone commit would have raised, the others commit. Any other failure rolls the whole batch
back; its writes are then committed one by one, so that only the one at fault fails.
Nothing is handed back -- no receipt, so no publish, ack or state kept in memory -- before
the transaction that makes it true has committed, and a crash anywhere leaves each write
committed or not, as a crash of a lone commit would.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from sqlalchemy.engine import Connection

from brainhands.shared import metrics
from brainhands.shared.batch import Batcher
from brainhands.shared.errors import BrainhandsError
from brainhands.shared.store.backends.base import Backend

log = logging.getLogger("brainhands.store")

MAX_BATCH = 64
"""Writes in one transaction at most (its row locks are held until it commits)."""

_W = TypeVar("_W")
_R = TypeVar("_R")

ApplyOne = Callable[[Connection, _W], _R]
"""Apply one write in the caller's transaction; a refused guard raises its error."""

ApplyMany = Callable[[Connection, Sequence[_W]], list[_R | BrainhandsError]]
"""Apply writes in the caller's one transaction, in order: each one's result, or the error
of its refused guard (which wrote nothing of it); any other failure raises, and the
transaction is rolled back."""


class GroupCommit(Generic[_W, _R]):
    """Commits writes, batching those that wait while a flush runs (``shared.batch``).

    ``order`` sorts a batch (by session or operation id), so that two batches lock the rows
    they share in one order (a superseded holder's write and its successor's, say).
    ``what`` names the writes in the ``brainhands_group_commit_writes`` metric.
    ``one_round_trip`` says of writes that ``apply_many`` (``apply_one``, for one) writes
    them in one round trip that is atomic on its own (one statement, or one statement
    pipelined for them all): they are then sent without BEGIN and COMMIT, two round trips
    fewer, and the server commits them at the end of that one.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        apply_one: ApplyOne[_W, _R],
        apply_many: ApplyMany[_W, _R],
        order: Callable[[_W], str],
        what: str,
        one_round_trip: Callable[[Sequence[_W]], bool] = lambda _writes: False,
    ) -> None:
        self.backend = backend
        self._apply_one = apply_one
        self._apply_many = apply_many
        self._one_round_trip = one_round_trip
        self.what = what
        self._size = metrics.GROUP_COMMIT.labels(what)
        self._batcher: Batcher[_W, _R] = Batcher(self._flush, max_batch=MAX_BATCH, order=order)

    async def commit(self, write: _W) -> _R:
        """Apply ``write`` atomically, alone or with others; raise what a lone commit of it
        would raise. The flush goes on if this caller is cancelled: the other writes are its
        too."""
        return await self._batcher(write)

    async def _flush(self, writes: list[_W]) -> Sequence[_R | BaseException]:
        if len(writes) == 1:
            return [await self._alone(writes[0])]
        try:
            return await self._apply(writes)
        except BrainhandsError as exc:
            log.warning(
                "a batch of %d writes failed (%s); committing them one by one",
                len(writes),
                exc,
                extra={"event": "batch_failed", "writes": len(writes)},
            )
            return [await self._alone(write) for write in writes]

    async def _apply(self, writes: Sequence[_W]) -> list[_R | BrainhandsError]:
        """One transaction for ``writes``: a result, or a refused guard's error, each."""
        self._size.observe(len(writes))
        return await self.backend.write(
            lambda conn: self._apply_many(conn, writes),
            single_statement=self._one_round_trip(writes),
        )

    async def _alone(self, write: _W) -> _R | BaseException:
        """``write`` in a transaction of its own: its result, or the error it raised."""
        self._size.observe(1)
        try:
            return await self.backend.write(
                lambda conn: self._apply_one(conn, write),
                single_statement=self._one_round_trip([write]),
            )
        except Exception as exc:
            return exc
