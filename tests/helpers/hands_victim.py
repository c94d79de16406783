"""``brainhands hands`` that dies right after committing outcomes, before acking their jobs.

    python -m tests.helpers.hands_victim RULE hands --pool email --tools ...

RULE is ``after-outcome`` (its first outcome), ``after-batch:N`` (the N-th transaction that
committed several outcomes together, before any of their result events is published or
their jobs acked), ``after-claims:N`` (the N-th round trip that claimed several operations
together, before any of them is started: ``tests.helpers.group_victim``) or ``after-effect``
(its first tool call that returned: the effect happened, and nothing after the claim was
committed for a ``safe`` or ``query`` call, only the started mark for an ``unsafe`` one).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from brainhands.cli import main
from brainhands.hands.outcomes import Outcomes
from brainhands.shared.store import OperationLedger
from tests.helpers.group_victim import arm_batch, arm_claims


def arm(rule: str) -> None:
    kind, _, arg = rule.partition(":")
    if kind == "after-batch":
        arm_batch("outcomes", int(arg))
        return
    if kind == "after-claims":
        arm_claims(OperationLedger, "_claim_batch", int(arg))
        return
    if kind == "after-effect":
        arm_effect()
        return
    if kind != "after-outcome":
        raise ValueError(f"unknown rule {rule!r}")
    original = OperationLedger.record_outcome

    async def record_outcome(self: OperationLedger, *args: Any, **kwargs: Any) -> None:
        await original(self, *args, **kwargs)
        os._exit(9)  # the outcome is durable; the job was never acked

    OperationLedger.record_outcome = record_outcome  # type: ignore[method-assign]


def arm_effect() -> None:
    """Die as the first tool call returns, before its outcome is recorded."""
    original = Outcomes.success

    async def success(self: Outcomes, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("via") is None:  # the call's own return, not a query's answer
            os._exit(9)
        await original(self, *args, **kwargs)

    Outcomes.success = success  # type: ignore[method-assign]


if __name__ == "__main__":
    arm(sys.argv[1])
    raise SystemExit(main(sys.argv[2:]))
