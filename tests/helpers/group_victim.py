"""Kill the process right after the N-th round trip that carried several calls of one kind
together, before any of their callers learns of it:

- ``arm_batch``: a transaction that committed several writes of one group commit
  (``shared.store.group``): nothing of the batch is published, acked or kept in memory;
- ``arm_claims``: a batch of fence claims (``shared.batch``): the store raised every fence
  of the batch, and no holder did anything under its token yet.

Each lone write or claim of that kind waits ``LONE_DELAY`` s first, so that those coming
meanwhile form the batch the rule waits for, however the machine's load spaces them out.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

from brainhands.shared.store.group import GroupCommit

LONE_DELAY = 0.3
"""Seconds a lone write waits before its commit."""


def arm_batch(what: str, n: int) -> None:
    """Die after the ``n``-th batch of the group commits of ``what`` (drafts, outcomes)."""
    original, alone = GroupCommit._apply, GroupCommit._alone
    count = 0

    async def slow_alone(self: GroupCommit[Any, Any], write: Any) -> Any:
        if self.what == what:
            await asyncio.sleep(LONE_DELAY)
        return await alone(self, write)

    async def apply(self: GroupCommit[Any, Any], writes: Any) -> Any:
        nonlocal count
        outcomes = await original(self, writes)
        if self.what == what:
            count += 1
            if count == n:
                os._exit(9)
        return outcomes

    GroupCommit._apply = apply  # type: ignore[method-assign]
    GroupCommit._alone = slow_alone  # type: ignore[method-assign]


def arm_claims(owner: type, flush: str, n: int) -> None:
    """Die after the ``n``-th round trip of ``owner.flush`` (a claims batcher's flush) that
    carried several claims."""
    original: Callable[[Any, list[Any]], Awaitable[list[Any]]] = getattr(owner, flush)
    count = 0

    async def claims(self: Any, batch: list[Any]) -> list[Any]:
        nonlocal count
        if len(batch) == 1:
            await asyncio.sleep(LONE_DELAY)
            return await original(self, batch)
        outcomes = await original(self, batch)
        count += 1
        if count == n:
            os._exit(9)
        return outcomes

    setattr(owner, flush, claims)
