"""Group commit: the drafts of many sessions in one transaction (DESIGN §3, "Group commit").

A Brain runs many passes at once, and each step of a pass ends with a commit. ``GroupCommit``
flushes the drafts that are ready when the previous flush ends, together: one transaction,
one WAL flush, instead of one per session. A draft that finds no flush running is flushed at
once, alone: no timer waits for company, so a lone call is never slowed.

In a batch, each session's guard (version and fence) is checked on its own, and a refused
guard drops only that session's draft: its caller gets the error a lone commit would have
raised, the others commit. Any other failure rolls the whole batch back; its drafts are then
committed one by one, so that only the one at fault fails. Nothing is handed back -- no
receipt, so no publish, ack or state kept in memory -- before the transaction that makes it
true has committed, and a crash anywhere leaves each draft committed or not, as a crash of a
lone commit would.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from brainhands.shared import metrics
from brainhands.shared.errors import BrainhandsError
from brainhands.shared.store.commit import apply_draft_sync, apply_drafts_sync
from brainhands.shared.store.draft import Draft
from brainhands.shared.store.engine import in_one_hop
from brainhands.shared.store.records import CommitReceipt

log = logging.getLogger("brainhands.store")

MAX_BATCH = 64
"""Drafts in one transaction at most (its row locks are held until it commits)."""


@dataclass
class _Pending:
    draft: Draft
    done: asyncio.Future[CommitReceipt] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def settle(self, outcome: CommitReceipt | BaseException) -> None:
        if self.done.done():  # its caller stopped waiting; the outcome stands regardless
            return
        if isinstance(outcome, asyncio.CancelledError):
            self.done.cancel()
        elif isinstance(outcome, BaseException):
            self.done.set_exception(outcome)
        else:
            self.done.set_result(outcome)


class GroupCommit:
    """Commits drafts, batching those that wait while a flush runs."""

    def __init__(self, engine: AsyncEngine, sqlite_writer: Engine | None) -> None:
        self.engine = engine
        self.sqlite_writer = sqlite_writer
        self._waiting: list[_Pending] = []
        self._flusher: asyncio.Task[None] | None = None

    async def commit(self, draft: Draft, *, handoff: float | None) -> CommitReceipt:
        """Apply ``draft`` atomically, alone or with others (``handoff``: see
        ``insert_outbox``); raise what a lone commit of it would raise."""
        pending = _Pending(draft)
        self._waiting.append(pending)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_all(handoff))
        # The flush goes on if this caller is cancelled: the other drafts are its too.
        return await pending.done

    async def _flush_all(self, handoff: float | None) -> None:
        try:
            while self._waiting:
                # Sorted by session: two batches lock the session rows they share in one
                # order (a superseded holder's draft and its successor's, say).
                batch = sorted(self._waiting[:MAX_BATCH], key=lambda p: p.draft.session_id)
                del self._waiting[:MAX_BATCH]
                await self._flush(batch, handoff)
        except BaseException as exc:
            for pending in self._waiting:  # the loop is going down: nobody waits forever
                pending.settle(exc)
            self._waiting.clear()
            raise
        finally:
            self._flusher = None

    async def _flush(self, batch: list[_Pending], handoff: float | None) -> None:
        if len(batch) == 1:
            await self._alone(batch[0], handoff)
            return
        try:
            outcomes = await self._apply([p.draft for p in batch], handoff)
        except BrainhandsError as exc:
            log.warning(
                "a batch of %d drafts failed (%s); committing them one by one",
                len(batch),
                exc,
                extra={"event": "batch_failed", "drafts": len(batch)},
            )
            for pending in batch:
                await self._alone(pending, handoff)
            return
        except BaseException as exc:
            for pending in batch:
                pending.settle(exc)
            raise
        for pending, outcome in zip(batch, outcomes, strict=True):
            pending.settle(outcome)

    async def _apply(
        self, drafts: Sequence[Draft], handoff: float | None
    ) -> list[CommitReceipt | BrainhandsError]:
        """One transaction for ``drafts``: a receipt, or a refused guard's error, each."""
        metrics.COMMIT_BATCH.observe(len(drafts))
        return await in_one_hop(
            self.engine,
            self.sqlite_writer,
            lambda conn: apply_drafts_sync(conn, drafts, handoff=handoff),
        )

    async def _alone(self, pending: _Pending, handoff: float | None) -> None:
        metrics.COMMIT_BATCH.observe(1)
        try:
            receipt = await in_one_hop(
                self.engine,
                self.sqlite_writer,
                lambda conn: apply_draft_sync(conn, pending.draft, handoff=handoff),
            )
        except BaseException as exc:
            pending.settle(exc)
            if not isinstance(exc, Exception):
                raise
            return
        pending.settle(receipt)
