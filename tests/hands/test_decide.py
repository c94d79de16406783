"""The Hands worker's decisions, as plain functions over every stored state."""

from __future__ import annotations

import http.client
import itertools

import pytest

from brainhands.hands.decide import (
    FailureVerdict,
    Step,
    after_interruption,
    after_query,
    goes_out_unmarked,
    interruption_error,
    judge_failure,
    lease_lasts,
    marks_started,
    next_step,
    retry_or_fail,
    tool_failures,
    was_interrupted,
)
from brainhands.shared.delivery import delivered_before
from brainhands.shared.errors import StoreUnavailable, ToolError, ToolUncertain
from brainhands.shared.tools import REPLAY_POLICIES, ReplayPolicy, RetryPolicy

NOW = 1000.0
RETRY = RetryPolicy(max_attempts=3, max_interruptions=4, interruption_delay=0.5, multiplier=2)


def decide(
    status: str,
    policy: ReplayPolicy,
    interruptions: int = 0,
    *,
    unmarked_before: bool = False,
    redelivered: bool = False,
    next_attempt_at: float | None = None,
) -> Step:
    return next_step(
        status,  # type: ignore[arg-type]
        policy,
        unmarked_before=unmarked_before,
        delivered_before=redelivered,
        interruptions=interruptions,
        retry=RETRY,
        next_attempt_at=next_attempt_at,
        now=NOW,
    )


@pytest.mark.parametrize(
    ("status", "policy"),
    list(itertools.product(("succeeded", "failed", "uncertain", "cancelled"), REPLAY_POLICIES)),
)
def test_an_existing_outcome_is_published_again(status: str, policy: ReplayPolicy) -> None:
    assert decide(status, policy) == Step("republish")


@pytest.mark.parametrize("policy", REPLAY_POLICIES)
def test_intended_runs_now_or_after_the_pending_backoff(policy: ReplayPolicy) -> None:
    assert decide("intended", policy) == Step("run", 0.0)
    assert decide("intended", policy, next_attempt_at=NOW + 2.5) == Step("run", 2.5)
    assert decide("intended", policy, next_attempt_at=NOW - 9) == Step("run", 0.0)


def test_an_interrupted_call_follows_the_replay_policy() -> None:
    assert decide("started", "safe") == Step("rerun", 0.5)
    assert decide("started", "query") == Step("query")
    assert decide("started", "unsafe") == Step("record_uncertain")
    # However many interruptions came before: unsafe is never run again on its own.
    assert decide("started", "unsafe", interruptions=99) == Step("record_uncertain")


def test_interruptions_have_their_own_budget_and_backoff() -> None:
    assert [after_interruption(n, RETRY) for n in range(5)] == [
        Step("rerun", 0.5),
        Step("rerun", 1.0),
        Step("rerun", 2.0),
        Step("rerun", 4.0),
        Step("record_interrupted"),
    ]
    capped = RetryPolicy(interruption_delay=1, multiplier=10, max_interruption_delay=7)
    assert after_interruption(5, capped) == Step("rerun", 7.0)
    # A call that keeps killing its worker ends: the budget is spent on interruptions alone.
    assert decide("started", "safe", interruptions=4) == Step("record_interrupted")


def test_the_default_backoff_outlasts_a_storm_of_several_minutes_and_stays_bounded() -> None:
    policy = RetryPolicy()
    waits = [after_interruption(n, policy).delay for n in range(policy.max_interruptions)]
    assert waits[:3] == [0.25, 0.5, 1.0]  # doubling from a quarter second
    assert max(waits) == 60.0  # never more than a minute between reruns
    # Even if every rerun is cut short at once, the budget is spent only after 13 minutes.
    assert sum(waits) > 13 * 60
    assert after_interruption(policy.max_interruptions, policy) == Step("record_interrupted")


def test_only_a_retryable_tool_error_says_nothing_happened() -> None:
    busy = ToolError("busy", retryable=True)
    for policy in REPLAY_POLICIES:
        assert judge_failure(busy, policy, failures=1, retry=RETRY).action == "retry"


@pytest.mark.parametrize(
    "exc",
    [
        http.client.RemoteDisconnected("Remote end closed connection without response"),
        ConnectionResetError(),
        TimeoutError("cancelled after its timeout of 5s"),
        OSError("network is unreachable"),
        StoreUnavailable("down"),
        ValueError("a bug after the effect"),
    ],
)
def test_any_other_exception_may_have_come_after_the_effect(exc: Exception) -> None:
    def action(policy: ReplayPolicy) -> str:
        return judge_failure(exc, policy, failures=1, retry=RETRY).action

    assert action("safe") == "retry"
    assert action("query") == "query"
    assert action("unsafe") == "uncertain"


def test_a_tool_can_say_it_failed_for_good_or_cannot_tell() -> None:
    for policy in REPLAY_POLICIES:
        assert judge_failure(ToolError("no such user"), policy, failures=1, retry=RETRY).action == (
            "fail"
        )
        verdict = judge_failure(ToolUncertain("no answer"), policy, failures=1, retry=RETRY)
        assert verdict.action == "uncertain"
        assert verdict.error["type"] == "ToolUncertain"


def test_retries_back_off_until_the_tools_own_failures_run_out() -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay=0.5, multiplier=2, max_delay=1.5)
    busy = ToolError("busy", retryable=True)
    first = judge_failure(busy, "unsafe", failures=1, retry=policy)
    second = judge_failure(busy, "unsafe", failures=2, retry=policy)
    last = judge_failure(busy, "unsafe", failures=3, retry=policy)
    assert (first.action, first.delay) == ("retry", 0.5)
    assert (second.action, second.delay) == ("retry", 1.0)
    assert last.action == "fail"
    assert last.error == {"type": "ToolError", "message": "busy", "retryable": True, "attempt": 3}
    hinted = ToolError("429", retryable=True, next_retry_delay=7)
    assert judge_failure(hinted, "safe", failures=1, retry=policy).delay == 7


def test_a_query_that_found_nothing_retries_within_the_budget() -> None:
    error = {"type": "OSError"}
    lost = OSError("connection reset")
    assert retry_or_fail(lost, failures=1, retry=RETRY, error=error) == FailureVerdict(
        "retry", 0.5, error
    )
    assert retry_or_fail(lost, failures=3, retry=RETRY, error=error).action == "fail"


def test_retry_delay_is_capped() -> None:
    policy = RetryPolicy(initial_delay=1, multiplier=10, max_delay=30)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [1, 10, 30, 30]


def test_interruptions_are_not_counted_as_the_tools_failures() -> None:
    assert tool_failures(attempts=1, interruptions=0) == 1
    # Two attempts died with their worker, the third raised: the tool failed once.
    assert tool_failures(attempts=3, interruptions=2) == 1


def test_an_interruption_is_recorded_with_its_count_and_why_the_call_ends() -> None:
    cut = interruption_error(attempts=2, interruptions=0, policy="unsafe", retry=RETRY, spent=False)
    assert cut == {
        "type": "Interrupted",
        "message": "attempt 2 was interrupted (its worker died or lost its lease mid-call); "
        "the effect may or may not have happened (replay policy 'unsafe')",
        "retryable": False,
        "attempt": 2,
        "interruptions": 1,
    }
    spent = interruption_error(attempts=5, interruptions=4, policy="safe", retry=RETRY, spent=True)
    assert spent["interruptions"] == 5
    assert spent["message"] == (
        "interrupted 5 times (its worker died or lost its lease mid-call); "
        "the budget of 4 interruptions is spent"
    )


# Started marks (issue 39): only an unsafe call commits "started" before it goes out.


def test_only_an_unsafe_call_is_marked_started() -> None:
    assert [marks_started(p) for p in ("safe", "query", "unsafe")] == [False, False, True]


@pytest.mark.parametrize(
    ("redelivered", "delivery_count", "republished", "expected"),
    [
        (False, None, False, False),  # a first delivery of a first publish
        (False, 0, False, False),  # a quorum queue's count of 0 is no redelivery
        (True, None, False, True),  # classic queue: the broker's redelivered flag
        (False, 2, False, True),  # quorum queue: x-delivery-count
        (False, None, True, True),  # the sweeper's re-publish
    ],
)
def test_which_deliveries_may_have_reached_a_worker_before(
    redelivered: bool, delivery_count: int | None, republished: bool, expected: bool
) -> None:
    assert (
        delivered_before(
            redelivered=redelivered, delivery_count=delivery_count, republished=republished
        )
        is expected
    )


@pytest.mark.parametrize("policy", REPLAY_POLICIES)
def test_a_first_delivery_of_a_fresh_call_runs_directly(policy: ReplayPolicy) -> None:
    assert decide("intended", policy) == Step("run", 0.0)


def test_a_query_call_whose_job_came_again_asks_first() -> None:
    # Redelivered or re-published with no earlier claim in the store (a store that failed
    # over may have lost it): ask before running, and a "no" runs it as its first run.
    assert decide("intended", "query", redelivered=True) == Step("query")
    assert after_query(interrupted=False, interruptions=0, retry=RETRY) == Step("run")
    # The delivery alone changes nothing for the others: safe may run again, and unsafe
    # was marked started had a call gone out.
    assert decide("intended", "safe", redelivered=True) == Step("run", 0.0)
    assert decide("intended", "unsafe", redelivered=True) == Step("run", 0.0)


@pytest.mark.parametrize("redelivered", [False, True])
def test_a_call_unmarked_before_with_no_started_mark_is_taken_as_started(
    redelivered: bool,
) -> None:
    # An earlier holder claimed it since it was last settled, and may have gone straight to
    # the tool and died before any commit:
    # however the job came (even as a duplicate first delivery), it is recovered as a
    # started one would be.
    def again(policy: ReplayPolicy, interruptions: int = 0, **kw: float) -> Step:
        return decide(
            "intended", policy, interruptions, unmarked_before=True, redelivered=redelivered, **kw
        )

    assert again("query") == Step("query")
    assert again("safe") == Step("rerun", 0.5)
    assert after_query(interrupted=True, interruptions=0, retry=RETRY) == Step("rerun", 0.5)
    assert again("safe", 4) == Step("record_interrupted")
    # An unsafe call that went out was marked started: "intended" says none did.
    assert again("unsafe") == Step("run", 0.0)
    assert again("unsafe", next_attempt_at=NOW + 2) == Step("run", 2.0)


def test_a_started_call_is_recovered_as_before_whatever_its_delivery() -> None:
    for before, redelivered in itertools.product((False, True), repeat=2):
        for policy, step in [
            ("unsafe", Step("record_uncertain")),
            ("query", Step("query")),
            ("safe", Step("rerun", 0.5)),
        ]:
            got = decide("started", policy, unmarked_before=before, redelivered=redelivered)
            assert got == step, (policy, before, redelivered)


def test_what_counts_as_interrupted() -> None:
    assert was_interrupted("started", "unsafe", unmarked_before=False)
    assert was_interrupted("intended", "safe", unmarked_before=True)
    assert was_interrupted("intended", "query", unmarked_before=True)
    assert not was_interrupted("intended", "unsafe", unmarked_before=True)
    assert not was_interrupted("intended", "safe", unmarked_before=False)
    assert not was_interrupted("succeeded", "safe", unmarked_before=True)


def test_only_a_call_straight_from_its_claim_with_its_lease_vouched_for_goes_out_unmarked() -> None:
    for policy in ("safe", "query"):
        assert goes_out_unmarked(policy, straight_from_claim=True, lease_lasts=True)
        # Deferred (a query, a backoff, an earlier attempt): the start is marked, so a
        # holder that settled and died before it is known to have interrupted nothing.
        assert not goes_out_unmarked(policy, straight_from_claim=False, lease_lasts=True)
        # A lease that may be running out: the mark's fenced write decides instead.
        assert not goes_out_unmarked(policy, straight_from_claim=True, lease_lasts=False)
    assert not goes_out_unmarked("unsafe", straight_from_claim=True, lease_lasts=True)


def test_an_unmarked_call_goes_out_only_while_its_lease_lasts_with_a_margin() -> None:
    # Renewed at 100 with a 10 s TTL: held until 110 by the local clock, a 1 s margin kept.
    expires_at, ttl = 110.0, 10.0
    assert lease_lasts(expires_at, ttl, now=100.0)  # just renewed
    assert lease_lasts(expires_at, ttl, now=108.9)
    assert not lease_lasts(expires_at, ttl, now=109.0)  # the margin is not enough
    assert not lease_lasts(expires_at, ttl, now=125.0)  # paused past its TTL
    # A healthy holder renews every quarter TTL: its checks have three quarters to spare.
    assert lease_lasts(expires_at, ttl, now=100.0 + ttl / 4)
