"""Pure decisions of a Hands worker: what to do with an operation in a given state.

No I/O here: the worker reads the operation row, asks these functions, and acts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from shared.errors import ToolError, is_retryable
from shared.store.ledger import FINAL_STATUSES
from shared.store.records import OperationStatus
from shared.tools import ReplayPolicy, RetryPolicy

Action = Literal["republish", "run", "query", "record_uncertain", "record_interrupted"]


@dataclass(frozen=True)
class Step:
    """What to do next with an operation, and how long to wait before doing it."""

    action: Action
    delay: float = 0.0


def next_step(
    status: OperationStatus,
    policy: ReplayPolicy,
    *,
    attempts: int,
    max_attempts: int,
    next_attempt_at: float | None,
    now: float,
) -> Step:
    """Decide from the stored state alone, as DESIGN §4 prescribes.

    - an outcome exists: publish it again (the earlier result event may have been lost);
    - ``intended``: no call is in flight: run, after the retry backoff if one is pending;
    - ``started``: a holder died mid-call, the effect may have happened: follow the policy.
      A ``safe`` call whose every attempt died with its worker is not run again: a tool
      that kills its worker must not crash-loop the pool.
    """
    if status in FINAL_STATUSES:
        return Step("republish")
    if status == "intended":
        return Step("run", max(0.0, (next_attempt_at or now) - now))
    if policy == "safe":
        return Step("record_interrupted" if attempts >= max_attempts else "run")
    if policy == "query":
        return Step("query")
    return Step("record_uncertain")


@dataclass(frozen=True)
class FailureVerdict:
    """Whether a failed attempt is retried (after ``delay``) or final, and the error record."""

    retry: bool
    delay: float
    error: dict[str, Any]


def judge_failure(exc: BaseException, *, attempt: int, retry: RetryPolicy) -> FailureVerdict:
    """Classify a tool's exception: retry within the policy's attempts, or fail for good."""
    retryable = is_retryable(exc)
    error = {
        "type": type(exc).__name__,
        "message": str(exc) or repr(exc),
        "retryable": retryable,
        "attempt": attempt,
    }
    if not retryable or attempt >= retry.max_attempts:
        return FailureVerdict(False, 0.0, error)
    delay = retry.delay(attempt)
    if isinstance(exc, ToolError) and exc.next_retry_delay is not None:
        delay = exc.next_retry_delay
    return FailureVerdict(True, delay, error)


def timeout_step(policy: ReplayPolicy) -> Action | Literal["retry"]:
    """A call ran past its timeout and was cancelled: did its effect happen?

    ``safe`` tools are simply retried; ``query`` tools are asked; ``unsafe`` ones cannot be
    known and are recorded ``uncertain``.
    """
    if policy == "safe":
        return "retry"
    if policy == "query":
        return "query"
    return "record_uncertain"
