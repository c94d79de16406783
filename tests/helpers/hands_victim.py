"""``brainhands hands`` that dies right after committing an outcome, before acking the job.

python -m tests.helpers.hands_victim hands --pool email --tools ...
"""

from __future__ import annotations

import os
import sys
from typing import Any

from brainhands.cli import main
from brainhands.shared.store import OperationLedger


def arm() -> None:
    original = OperationLedger.record_outcome

    async def record_outcome(self: OperationLedger, *args: Any, **kwargs: Any) -> None:
        await original(self, *args, **kwargs)
        os._exit(9)  # the outcome is durable; the job was never acked

    OperationLedger.record_outcome = record_outcome  # type: ignore[method-assign]


if __name__ == "__main__":
    arm()
    raise SystemExit(main(sys.argv[1:]))
