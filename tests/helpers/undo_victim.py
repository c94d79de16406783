"""``brainhands`` that kills itself right after the commit that dispatches its N-th undo.

    python -m tests.helpers.undo_victim N brain --compat v1 --tasks ...

The undo's job is in the outbox of that commit, which is durable; nothing after it ran:
the next Brain finds the compensation where that commit left it (``brain.compensation``).
"""

from __future__ import annotations

import os
import sys

from brainhands.cli import main
from brainhands.shared.store import CommitReceipt, Draft, Store

UNDO_TOOL = "cancel_booking"


def dispatches_undo(draft: Draft) -> bool:
    return any(
        isinstance(t.get("input"), dict) and t["input"].get("tool") == UNDO_TOOL
        for t in draft.new_tasks
    )


def arm(n: int) -> None:
    original = Store.commit
    seen = 0

    async def commit(self: Store, draft: Draft) -> CommitReceipt:
        nonlocal seen
        receipt = await original(self, draft)
        if dispatches_undo(draft):
            seen += 1
            if seen == n:
                os._exit(9)
        return receipt

    Store.commit = commit  # type: ignore[method-assign]


if __name__ == "__main__":
    arm(int(sys.argv[1]))
    raise SystemExit(main(sys.argv[2:]))
