"""The Hands worker's decisions, as plain functions over every stored state."""

from __future__ import annotations

import itertools

import pytest

from hands.decide import Step, judge_failure, next_step, timeout_step
from shared.errors import StoreUnavailable, ToolError
from shared.tools import REPLAY_POLICIES, RetryPolicy

NOW = 1000.0


@pytest.mark.parametrize(
    ("status", "policy"),
    list(itertools.product(("succeeded", "failed", "uncertain", "cancelled"), REPLAY_POLICIES)),
)
def test_an_existing_outcome_is_published_again(status: str, policy: str) -> None:
    step = next_step(status, policy, attempts=1, max_attempts=3, next_attempt_at=None, now=NOW)  # type: ignore[arg-type]
    assert step == Step("republish")


@pytest.mark.parametrize("policy", REPLAY_POLICIES)
def test_intended_runs_now_or_after_the_pending_backoff(policy: str) -> None:
    fresh = next_step("intended", policy, attempts=0, max_attempts=3, next_attempt_at=None, now=NOW)  # type: ignore[arg-type]
    assert fresh == Step("run", 0.0)
    backoff = next_step(
        "intended", policy, attempts=1, max_attempts=3, next_attempt_at=NOW + 2.5, now=NOW
    )  # type: ignore[arg-type]
    assert backoff == Step("run", 2.5)
    overdue = next_step(
        "intended", policy, attempts=1, max_attempts=3, next_attempt_at=NOW - 9, now=NOW
    )  # type: ignore[arg-type]
    assert overdue == Step("run", 0.0)


def test_started_follows_the_replay_policy() -> None:
    def decide(policy: str, attempts: int = 1) -> str:
        return next_step(
            "started",
            policy,
            attempts=attempts,
            max_attempts=3,  # type: ignore[arg-type]
            next_attempt_at=None,
            now=NOW,
        ).action

    assert decide("safe") == "run"
    assert decide("query") == "query"
    assert decide("unsafe") == "record_uncertain"
    # A safe call that died with its worker on every attempt is not run again.
    assert decide("safe", attempts=3) == "record_interrupted"
    assert decide("query", attempts=3) == "query"
    assert decide("unsafe", attempts=3) == "record_uncertain"


def test_retryable_failures_back_off_until_the_attempts_run_out() -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay=0.5, multiplier=2, max_delay=1.5)
    first = judge_failure(ToolError("busy", retryable=True), attempt=1, retry=policy)
    second = judge_failure(ToolError("busy", retryable=True), attempt=2, retry=policy)
    last = judge_failure(ToolError("busy", retryable=True), attempt=3, retry=policy)
    assert (first.retry, first.delay) == (True, 0.5)
    assert (second.retry, second.delay) == (True, 1.0)
    assert not last.retry
    assert last.error == {"type": "ToolError", "message": "busy", "retryable": True, "attempt": 3}


def test_what_is_retryable() -> None:
    policy = RetryPolicy(max_attempts=5)
    assert not judge_failure(ValueError("bad input"), attempt=1, retry=policy).retry
    assert not judge_failure(ToolError("no such user"), attempt=1, retry=policy).retry
    assert judge_failure(ConnectionResetError(), attempt=1, retry=policy).retry
    assert judge_failure(StoreUnavailable("down"), attempt=1, retry=policy).retry
    hinted = judge_failure(
        ToolError("429", retryable=True, next_retry_delay=7), attempt=1, retry=policy
    )
    assert hinted.delay == 7


def test_retry_delay_is_capped() -> None:
    policy = RetryPolicy(initial_delay=1, multiplier=10, max_delay=30)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [1, 10, 30, 30]


def test_a_timed_out_call_is_judged_by_its_policy() -> None:
    assert timeout_step("safe") == "retry"
    assert timeout_step("query") == "query"
    assert timeout_step("unsafe") == "record_uncertain"
