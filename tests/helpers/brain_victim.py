"""``brainhands`` that kills itself at a chosen commit.

    python -m tests.helpers.brain_victim RULE brain --compat v1 --tasks ...

RULE is one of ``after:N`` / ``before:N`` (the N-th commit of the process), or
``after-entry:KIND`` / ``before-entry:KIND`` (right after / right before the first commit
that appends an entry of KIND; ``before-entry:model``: the model answered, the answer is not
yet durable; ``before-entry:KIND#N``: the N-th such commit), or ``after-inbox:`` /
``before-inbox:`` (the first commit that applies an inbox request: a signal, an approval's
decision, a cancel), ``after-batch:N`` (right after the N-th transaction that committed the
drafts of several sessions together, before any of their callers learns of it), or
``after-claims:N`` (right after the N-th round trip that claimed several sessions together,
before any pass ran: ``tests.helpers.group_victim``).
The exit (``os._exit``) lands exactly between two facts recovery must tell apart.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from brainhands.cli import main
from brainhands.shared.store import CommitReceipt, Draft, Store
from tests.helpers.group_victim import arm_batch, arm_claims


def matches(rule: str, draft: Draft, count: int, entry_hits: list[int]) -> tuple[bool, bool]:
    """(die before this commit, die after it); ``entry_hits`` counts the commits that
    appended the rule's entry kind so far."""
    kind, _, arg = rule.partition(":")
    if kind in ("before", "after"):
        hit = count == int(arg)
        return (hit and kind == "before", hit and kind == "after")
    if kind in ("before-entry", "after-entry"):
        entry, _, nth = arg.partition("#")
        if any(e.kind == entry for e in draft.entries):
            entry_hits[0] += 1
        hit = entry_hits[0] == int(nth or 1) and any(e.kind == entry for e in draft.entries)
        return (hit and kind == "before-entry", hit and kind == "after-entry")
    if kind in ("before-inbox", "after-inbox"):
        hit = bool(draft.applied_inbox)
        return (hit and kind == "before-inbox", hit and kind == "after-inbox")
    raise ValueError(f"unknown rule {rule!r}")


def arm(rule: str) -> None:
    kind, _, arg = rule.partition(":")
    if kind == "after-batch":
        arm_batch("drafts", int(arg))
        return
    if kind == "after-claims":
        arm_claims(Store, "_claim_batch", int(arg))
        return
    original = Store.commit
    count = 0
    entry_hits = [0]

    async def commit(self: Store, draft: Draft) -> CommitReceipt:
        nonlocal count
        count += 1
        before, after = matches(rule, draft, count, entry_hits)
        if before:
            os._exit(9)
        receipt = await original(self, draft)
        if after:
            os._exit(9)
        return receipt

    Store.commit = commit  # type: ignore[method-assign]


if __name__ == "__main__":
    arm(sys.argv[1])
    args: Any = sys.argv[2:]
    raise SystemExit(main(args))
