"""Kill the process right after the N-th transaction that committed several writes of one
group commit (``shared.store.group``) together, before any of their callers learns of it:
nothing of the batch is published, acked or kept in memory.

Each lone write of that group waits ``LONE_DELAY`` s before its commit, so that writes coming
meanwhile form the batch the rule waits for, however the machine's load spaces them out.
"""

from __future__ import annotations

import asyncio
import os
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
