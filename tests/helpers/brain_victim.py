"""``brainhands`` that kills itself right after its N-th commit (or right before it).

    python -m tests.helpers.brain_victim N after|before brain --compat v1 --tasks ...

The SIGKILL-equivalent (``os._exit``) lands exactly between two facts the recovery must tell
apart: a commit made and the next one not yet begun (``after``), or a phase run whose result
was never committed (``before``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from brainhands.cli import main
from shared.store import CommitReceipt, Draft, Store


def arm(limit: int, when: str) -> None:
    original = Store.commit
    count = 0

    async def commit(self: Store, draft: Draft) -> CommitReceipt:
        nonlocal count
        count += 1
        if count == limit and when == "before":
            os._exit(9)
        receipt = await original(self, draft)
        if count == limit and when == "after":
            os._exit(9)
        return receipt

    Store.commit = commit  # type: ignore[method-assign]


if __name__ == "__main__":
    arm(int(sys.argv[1]), sys.argv[2])
    args: Any = sys.argv[3:]
    raise SystemExit(main(args))
