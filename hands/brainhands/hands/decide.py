"""Pure decisions of a Hands worker: what to do with an operation in a given state, with a
call that raised, and how a call's attempts count.

No I/O here: the worker reads the operation row, asks these functions, and acts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from brainhands.shared.errors import ToolError, ToolUncertain, WorkspaceMoved
from brainhands.shared.store import FINAL_OPERATION_STATUSES, JSON, OperationStatus
from brainhands.shared.tools import ReplayPolicy, RetryPolicy

Action = Literal["republish", "run", "query", "rerun", "record_uncertain", "record_interrupted"]


@dataclass(frozen=True)
class Step:
    """What to do next with an operation, and how long to wait before doing it."""

    action: Action
    delay: float = 0.0


def marks_started(policy: ReplayPolicy) -> bool:
    """Whether every call of ``policy`` commits ``started`` before it goes out: only an
    ``unsafe`` one, whose interruption must be found as such (``uncertain``, never run
    again). A ``safe`` call may run again by definition, and a ``query`` call asks first
    whenever an earlier holder may have made it (``next_step``), so neither pays that
    commit when it goes out straight from its claim (``goes_out_unmarked``)."""
    return policy == "unsafe"


def goes_out_unmarked(
    policy: ReplayPolicy, *, straight_from_claim: bool, lease_lasts: bool
) -> bool:
    """Whether an attempt goes out with no ``started`` mark: a ``safe`` or ``query`` call
    whose holder goes to the tool straight from its claim -- nothing deferred in between (a
    query, a backoff, an earlier attempt) -- while its lease lasts (``lease_lasts``).

    Any other attempt marks its start first. The mark is what tells the next holder that
    this one reached the tool: a holder that settled its row (``unsettled_claims``) and died
    before a marked start interrupted nothing (``was_interrupted``). It is also the fenced
    write that lets a holder whose lease may be running out go on: a holder paused past its
    TTL is refused there instead of calling."""
    return straight_from_claim and lease_lasts and not marks_started(policy)


LEASE_MARGIN = 0.1
"""The share of its TTL a lease must still have when a call with no started mark goes out:
room for the request to leave before the lease could be another holder's."""


def lease_lasts(expires_at: float, ttl: float, *, now: float) -> bool:
    """Whether a lease known to be held until ``expires_at`` (TTL ``ttl`` seconds; both by
    the monotonic clock) is still held at ``now`` with ``LEASE_MARGIN`` to spare.

    A call with no started mark has no fenced write between the claim and the tool: a
    holder paused past its TTL meanwhile may have been superseded by one that asked, found
    nothing and ran the call, so it must not send with no mark. A healthy holder renews
    every quarter TTL and keeps three quarters left.
    """
    return now < expires_at - ttl * LEASE_MARGIN


def next_step(
    status: OperationStatus,
    policy: ReplayPolicy,
    *,
    unmarked_before: bool,
    delivered_before: bool,
    interruptions: int,
    retry: RetryPolicy,
    next_attempt_at: float | None,
    now: float,
) -> Step:
    """Decide from the stored state (and, for ``query``, the delivery), as DESIGN §4 prescribes.

    - an outcome exists: publish it again (the earlier result event may have been lost);
    - ``started``: the holder died or lost its lease mid-call, and the effect may have
      happened: ``unsafe`` is recorded ``uncertain``, ``query`` asks first, ``safe`` runs
      again as an interruption (``after_interruption``);
    - ``intended``, ``unmarked_before`` (an earlier holder claimed the row since it was last
      settled, and may have gone straight to the tool: ``claims.OperationClaim``) and a
      policy that goes out unmarked: that holder may have made the call and died with no
      commit, so it is taken as ``started`` -- ``query`` asks, ``safe`` runs again as an
      interruption;
    - ``intended``, a ``query`` call whose job ``delivered_before`` (redelivered by the
      broker or re-published by the sweeper): asks first, though the store names no earlier
      holder (a store that failed over may have lost that holder's claim);
    - otherwise no call is in flight: run, after the retry backoff if one is pending. An
      ``unsafe`` call is found ``started`` when one went out, so ``intended`` is enough.
    """
    if status in FINAL_OPERATION_STATUSES:
        return Step("republish")
    interrupted = was_interrupted(status, policy, unmarked_before=unmarked_before)
    if interrupted and policy == "unsafe":
        return Step("record_uncertain")
    if policy == "query" and (interrupted or delivered_before):
        return Step("query")
    if interrupted:
        return after_interruption(interruptions, retry)
    return Step("run", max(0.0, (next_attempt_at or now) - now))


def after_query(*, interrupted: bool, interruptions: int, retry: RetryPolicy) -> Step:
    """What follows a query that found no effect: the call runs again, as an interruption
    when an earlier holder had it (``interrupted``), else as its first run."""
    if interrupted:
        return after_interruption(interruptions, retry)
    return Step("run")


def was_interrupted(
    status: OperationStatus, policy: ReplayPolicy, *, unmarked_before: bool
) -> bool:
    """Whether an operation not yet final was cut short by an earlier holder: it says
    ``started``, or an earlier holder may have gone out unmarked since it was last settled
    (``unmarked_before``) and its policy lets a call go out so."""
    return status == "started" or (
        status not in FINAL_OPERATION_STATUSES and unmarked_before and not marks_started(policy)
    )


def after_interruption(interruptions: int, retry: RetryPolicy) -> Step:
    """An interrupted call may run again (``rerun``, counted, after a backoff) until
    ``max_interruptions`` are spent; then it ends ``failed`` with that reason."""
    if interruptions >= retry.max_interruptions:
        return Step("record_interrupted")
    return Step("rerun", retry.delay_after_interruption(interruptions + 1))


@dataclass(frozen=True)
class Deferred:
    """The first write of a holder whose start is deferred (a query, a backoff), and when
    its call may go out: the row is settled with what earlier holders did, so a death
    before the (marked) start interrupts nothing."""

    error: JSON
    """The error the row keeps: the cut-short attempt's record, or the row's own."""
    retry_at: float | None
    """When the call may go out (the epoch): after the backoff that follows an interruption,
    else the row's pending retry, if any."""
    backoff: float
    """The wait after an interruption (0.0 when there was none)."""


@dataclass(frozen=True)
class Takeover:
    """What a holder takes over from the earlier holders of an operation not yet final, when
    it does not go straight from its claim to the tool (``take_over``): whether one of them
    was cut short, and the counts its writes carry on from.

    An attempt cut short that went out with no started mark (``attempted``) was counted by
    no write: this holder counts it, with its interruption, in its first write -- the record
    of an ending (``ending``) or the settle of a deferred start (``deferred``)."""

    policy: ReplayPolicy
    retry: RetryPolicy
    interrupted: bool
    """An earlier holder's attempt was cut short (``was_interrupted``)."""
    attempted: bool
    """That attempt went out with no started mark: counted in this holder's first write."""
    attempts: int
    """The call's attempts so far, that one included."""
    interruptions: int
    """The call's interruptions before this holder's first write (the row's)."""

    @property
    def interruptions_counted(self) -> int:
        """The call's interruptions once this holder's first write has counted its own."""
        return self.interruptions + self.interrupted

    @property
    def queried_attempt(self) -> int:
        """The attempt a query answers for: the one cut short, counted already by the first
        write; with none cut short (a job delivered before, nothing claimed), one more, counted
        with the outcome the query finds (``attempted`` there: ``not interrupted``)."""
        return self.attempts if self.interrupted else self.attempts + 1

    def cut_short(self, *, spent: bool) -> dict[str, Any]:
        """The record of the attempt cut short (``spent``: the last the budget allowed)."""
        return interruption_error(
            attempts=self.attempts,
            interruptions=self.interruptions,
            policy=self.policy,
            retry=self.retry,
            spent=spent,
        )

    def ending(self, action: Action) -> tuple[OperationStatus, dict[str, Any]]:
        """The outcome ``record_uncertain`` or ``record_interrupted`` records: ``uncertain``,
        or ``failed`` with the budget of interruptions spent."""
        if action == "record_uncertain":
            return "uncertain", self.cut_short(spent=False)
        if action == "record_interrupted":
            return "failed", self.cut_short(spent=True)
        raise ValueError(f"{action!r} records no outcome (record_uncertain, record_interrupted)")

    def deferred(self, *, error: JSON, next_attempt_at: float | None, now: float) -> Deferred:
        """The settle before a deferred start (``error`` and ``next_attempt_at``: the row's):
        after an interruption, its record and the backoff that follows it; otherwise the
        row as it stands."""
        if not self.interrupted:
            return Deferred(error, next_attempt_at, 0.0)
        backoff = after_interruption(self.interruptions, self.retry).delay
        return Deferred(self.cut_short(spent=False), now + backoff, backoff)


def take_over(
    status: OperationStatus,
    policy: ReplayPolicy,
    retry: RetryPolicy,
    *,
    attempts: int,
    interruptions: int,
    unmarked_before: bool,
) -> Takeover:
    """The ``Takeover`` of an operation whose row stands at ``status`` with ``attempts`` and
    ``interruptions``. A ``started`` row counted its attempt with the mark; one taken as
    started (``unmarked_before``, a policy that goes out unmarked) did not."""
    interrupted = was_interrupted(status, policy, unmarked_before=unmarked_before)
    attempted = interrupted and status != "started"
    return Takeover(
        policy,
        retry,
        interrupted=interrupted,
        attempted=attempted,
        attempts=attempts + attempted,
        interruptions=interruptions,
    )


Verdict = Literal["retry", "fail", "query", "uncertain", "again"]


@dataclass(frozen=True)
class FailureVerdict:
    """What follows a call that raised: ``retry`` (after ``delay``), ``fail`` for good,
    ``query`` the external system first, record ``uncertain``, or run ``again`` at once as
    after an interruption (``judge_attempt``); and the error record."""

    action: Verdict
    delay: float
    error: dict[str, Any]


def judge_failure(
    exc: BaseException, policy: ReplayPolicy, *, failures: int, retry: RetryPolicy
) -> FailureVerdict:
    """Classify an exception from a started call (``failures`` counts the tool's own failed
    attempts, this one included; interruptions are not among them).

    Only a ``ToolError`` marked retryable is the tool author's word that nothing happened. A
    ``ToolError`` that is not retryable is a definite failure, and ``ToolUncertain`` the
    author's word that nobody can know. Anything else (a lost response's ``OSError``, a
    timeout, a bug) may have come after the effect: ``safe`` retries, ``query`` asks first,
    ``unsafe`` is ``uncertain``, never run again on its own.
    """
    nothing_happened = isinstance(exc, ToolError) and exc.retryable
    error = {
        "type": type(exc).__name__,
        "message": str(exc) or repr(exc),
        "retryable": nothing_happened,
        "attempt": failures,
    }
    if isinstance(exc, ToolUncertain):
        return FailureVerdict("uncertain", 0.0, error)
    if isinstance(exc, ToolError) and not exc.retryable:
        return FailureVerdict("fail", 0.0, error)
    if not nothing_happened and policy == "unsafe":
        return FailureVerdict("uncertain", 0.0, error)
    if not nothing_happened and policy == "query":
        return FailureVerdict("query", 0.0, error)
    return retry_or_fail(exc, failures=failures, retry=retry, error=error)


def judge_attempt(
    exc: BaseException,
    policy: ReplayPolicy,
    *,
    failures: int,
    interruptions: int,
    retry: RetryPolicy,
) -> FailureVerdict:
    """What follows an attempt that ended in ``exc`` (``judge_failure``), or whose changes
    to its workspace were discarded because another call committed the workspace's next
    version first (``WorkspaceMoved``): a ``safe`` call then runs ``again`` at once on the
    new version, the attempt counted as an interruption (not the tool's failure) until
    ``max_interruptions`` are spent; any other is judged as after a failure that may have
    come after the effect: what it did outside its workspace is not known."""
    moved = isinstance(exc, WorkspaceMoved) and policy == "safe"
    if moved and interruptions < retry.max_interruptions:
        error = {"type": type(exc).__name__, "message": str(exc), "retryable": True}
        return FailureVerdict("again", 0.0, error)
    return judge_failure(exc, policy, failures=failures, retry=retry)


def retry_or_fail(
    exc: BaseException, *, failures: int, retry: RetryPolicy, error: dict[str, Any]
) -> FailureVerdict:
    """A failure after which running again is harmless: retry within ``max_attempts``."""
    if failures >= retry.max_attempts:
        return FailureVerdict("fail", 0.0, error)
    delay = retry.delay(failures)
    if isinstance(exc, ToolError) and exc.next_retry_delay is not None:
        delay = exc.next_retry_delay
    return FailureVerdict("retry", delay, error)


def tool_failures(attempts: int, interruptions: int) -> int:
    """How many of a call's ``attempts`` failed by the tool's own doing, the figure
    ``max_attempts`` bounds: an attempt cut short by its worker's death or a lost lease is an
    interruption, spent from a budget of its own (``max_interruptions``)."""
    return attempts - interruptions


def interruption_error(
    *, attempts: int, interruptions: int, policy: ReplayPolicy, retry: RetryPolicy, spent: bool
) -> dict[str, Any]:
    """The error record of attempt ``attempts``, cut short by its worker's death or a lost
    lease after ``interruptions`` earlier ones; ``spent``: it was one too many, and the call
    ends ``failed`` (``record_interrupted``)."""
    interruptions += 1
    if spent:
        message = (
            f"interrupted {interruptions} times (its worker died or lost its lease mid-call); "
            f"the budget of {retry.max_interruptions} interruptions is spent"
        )
    else:
        message = (
            f"attempt {attempts} was interrupted (its worker died or lost its lease "
            f"mid-call); the effect may or may not have happened (replay policy {policy!r})"
        )
    return {
        "type": "Interrupted",
        "message": message,
        "retryable": False,
        "attempt": attempts,
        "interruptions": interruptions,
    }
