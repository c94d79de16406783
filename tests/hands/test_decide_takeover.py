"""How a Hands holder takes over a call from its earlier holders (``decide.take_over``): what
it counts, what it records and when the call may go out, as plain functions over the row."""

from __future__ import annotations

import itertools

import pytest

from brainhands.hands.decide import (
    Deferred,
    Takeover,
    after_interruption,
    interruption_error,
    next_step,
    take_over,
)
from brainhands.shared.store import OperationStatus
from brainhands.shared.tools import REPLAY_POLICIES, ReplayPolicy, RetryPolicy

NOW = 1000.0
RETRY = RetryPolicy(max_attempts=3, max_interruptions=4, interruption_delay=0.5, multiplier=2)


def taken(
    status: OperationStatus,
    policy: ReplayPolicy,
    *,
    attempts: int = 2,
    interruptions: int = 1,
    unmarked_before: bool = False,
) -> Takeover:
    return take_over(
        status,
        policy,
        RETRY,
        attempts=attempts,
        interruptions=interruptions,
        unmarked_before=unmarked_before,
    )


@pytest.mark.parametrize("policy", REPLAY_POLICIES)
def test_a_started_row_counted_its_attempt_with_the_mark(policy: ReplayPolicy) -> None:
    started = taken("started", policy, attempts=2, interruptions=1)
    assert started.interrupted
    assert not started.attempted
    assert started.attempts == 2
    assert started.interruptions == 1
    assert started.interruptions_counted == 2


@pytest.mark.parametrize("policy", ["safe", "query"])
def test_an_attempt_that_went_out_unmarked_is_counted_by_the_holder_that_takes_over(
    policy: ReplayPolicy,
) -> None:
    # An earlier holder claimed the row since it was last settled and may have gone to the
    # tool with no mark: no write counted that attempt, so this holder's first write does.
    unmarked = taken("intended", policy, attempts=2, interruptions=1, unmarked_before=True)
    assert unmarked.interrupted
    assert unmarked.attempted
    assert unmarked.attempts == 3
    assert unmarked.interruptions_counted == 2
    # Its record names that attempt, and the interruption it was.
    assert unmarked.cut_short(spent=False)["attempt"] == 3
    assert unmarked.cut_short(spent=False)["interruptions"] == 2


def test_an_unsafe_call_claimed_before_with_no_mark_never_went_out() -> None:
    unsafe = taken("intended", "unsafe", attempts=2, interruptions=1, unmarked_before=True)
    assert not unsafe.interrupted
    assert not unsafe.attempted
    assert (unsafe.attempts, unsafe.interruptions_counted) == (2, 1)


@pytest.mark.parametrize(
    ("status", "policy", "unmarked_before"),
    # Every row not yet final, whichever holder claimed it before.
    list(itertools.product(("intended", "started"), REPLAY_POLICIES, (False, True))),
)
def test_the_takeover_agrees_with_the_step_on_whether_a_call_was_cut_short(
    status: OperationStatus, policy: ReplayPolicy, unmarked_before: bool
) -> None:
    step = next_step(
        status,
        policy,
        unmarked_before=unmarked_before,
        delivered_before=False,
        interruptions=1,
        retry=RETRY,
        next_attempt_at=None,
        now=NOW,
    )
    cut = taken(status, policy, unmarked_before=unmarked_before).interrupted
    assert cut == (step.action != "run"), step


def test_a_query_answers_for_the_attempt_cut_short_or_for_one_of_its_own() -> None:
    # Cut short: the attempt the first write counted (the mark's, or the unmarked one's).
    assert taken("started", "query", attempts=2).queried_attempt == 2
    assert taken("intended", "query", attempts=2, unmarked_before=True).queried_attempt == 3
    # A job delivered before with nothing claimed in the store: the query counts one more,
    # with the outcome it finds.
    assert taken("intended", "query", attempts=2).queried_attempt == 3


def test_an_ending_records_uncertain_or_the_interruptions_spent() -> None:
    unsafe = taken("started", "unsafe", attempts=2, interruptions=0)
    assert unsafe.ending("record_uncertain") == (
        "uncertain",
        interruption_error(attempts=2, interruptions=0, policy="unsafe", retry=RETRY, spent=False),
    )
    spent = taken("intended", "safe", attempts=4, interruptions=4, unmarked_before=True)
    status, error = spent.ending("record_interrupted")
    assert status == "failed"
    assert error == interruption_error(
        attempts=5, interruptions=4, policy="safe", retry=RETRY, spent=True
    )
    assert error["interruptions"] == 5


@pytest.mark.parametrize("action", ["run", "rerun", "query", "republish"])
def test_only_the_two_recording_steps_have_an_ending(action: str) -> None:
    with pytest.raises(ValueError, match="records no outcome"):
        taken("started", "safe").ending(action)  # type: ignore[arg-type]


def test_a_deferred_start_after_an_interruption_settles_its_record_and_backs_off() -> None:
    cut = taken("started", "safe", attempts=3, interruptions=2)
    backoff = after_interruption(2, RETRY).delay
    assert backoff == 2.0
    assert cut.deferred(error={"type": "OSError"}, next_attempt_at=None, now=NOW) == Deferred(
        error=cut.cut_short(spent=False), retry_at=NOW + backoff, backoff=backoff
    )


def test_a_deferred_start_with_nothing_cut_short_keeps_the_row_as_it_stands() -> None:
    # A query call whose job came again, nothing claimed: its error and pending retry stay.
    fresh = taken("intended", "query", attempts=1, interruptions=0)
    error = {"type": "ToolError", "message": "busy", "retryable": True, "attempt": 1}
    assert fresh.deferred(error=error, next_attempt_at=NOW + 5, now=NOW) == Deferred(
        error=error, retry_at=NOW + 5, backoff=0.0
    )
    assert fresh.deferred(error=None, next_attempt_at=None, now=NOW) == Deferred(None, None, 0.0)
