"""Operation claims: a Hands worker's first write for a call, and what it learns from it.

A claim raises the operation's fence to the worker's lease token (``fence``), and in the
same hop reads whether the call's task has a committed cancel request: a call whose policy
commits no ``started`` mark is refused here as one marked ``started`` would be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, bindparam, select, true
from sqlalchemy.engine import Connection

from brainhands.shared.store import schema
from brainhands.shared.store.fence import OperationFenceClaim, claim_operation_fences
from brainhands.shared.store.hot import hot, run
from brainhands.shared.store.load import operation_record
from brainhands.shared.store.records import OperationRecord

_t = schema.task

CANCELLED_TASKS = select(_t.c.id).where(
    _t.c.id.in_(bindparam("task_ids", expanding=True)), _t.c.cancel_requested.is_(true())
)
"""Which of ``task_ids`` have a committed cancel request."""
_CLAIMED_CANCELS = hot(CANCELLED_TASKS)


@dataclass(frozen=True)
class OperationClaim:
    """The result of claiming an operation for a lease token."""

    fence: int
    operation: OperationRecord
    """The row as it stood right after the claim."""
    cancel_requested: bool = False
    """The call's task has a committed cancel request (read in the claim's round trip): a
    call whose policy commits no ``started`` mark checks it here instead."""

    @property
    def unmarked_before(self) -> bool:
        """Whether an earlier holder may have started the call with no ``started`` mark:
        one claimed the row since its holders last settled it (a retry scheduled, a start
        marked) -- a holder goes from its claim straight to the tool, unmarked, only when
        nothing was deferred. A holder that settled and died before its (marked) start
        interrupted nothing.

        The claim counts itself among ``unsettled_claims`` (``claim_operation_fences``); a
        row of an earlier build has no count, and any earlier claim of it may have started
        the call."""
        claims = self.operation.unsettled_claims
        return claims is None or claims > 1


def claim_operations(
    conn: Connection, insert: Callable[[Table], Any], claims: list[OperationFenceClaim]
) -> list[OperationClaim | BaseException]:
    """Claim each operation (``claim_operation_fences``), then read which of the
    claimed calls' tasks have a committed cancel request: a read, in the same hop, that lets
    a call with no ``started`` mark be refused as one marked ``started`` would be."""
    claimed = claim_operation_fences(conn, insert, claims)
    task_ids = [row.task_id for row in claimed if not isinstance(row, BaseException)]
    task_ids = [task_id for task_id in task_ids if task_id is not None]
    cancelled = (
        {row.id for row in run(conn, _CLAIMED_CANCELS, {"task_ids": task_ids})}
        if task_ids
        else set()
    )
    return [
        row
        if isinstance(row, BaseException)
        else OperationClaim(claim.token, operation_record(row), row.task_id in cancelled)
        for claim, row in zip(claims, claimed, strict=True)
    ]
