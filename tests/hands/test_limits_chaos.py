"""Limits per tool across real Hands processes, one of them SIGKILLed mid-run: the tools'
external ledgers (``tests.helpers.ledgers``) are the judges of how many calls ran at once
and how many began in any one second."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brainhands.shared.config import normalize_database_url
from tests.helpers import ledgers
from tests.helpers.harness import HandsHarness, hands_deployment
from tests.helpers.ledgers import calls, most_at_once, most_in_a_second
from tests.helpers.polling import eventually
from tests.helpers.stores import StoreTarget, drop_schema

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(60)]


@pytest.fixture
async def limits(
    postgres_url: str,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[HandsHarness]:
    """Hands of the ``limits`` pool (``tests.helpers.limited_tools``), their ledgers in
    ``tmp_path``."""
    monkeypatch.setattr(ledgers, "LEDGERS", tmp_path)
    target = StoreTarget(normalize_database_url(postgres_url), namespace)
    try:
        async with hands_deployment(
            target,
            rabbitmq_url,
            redis_url,
            namespace,
            tmp_path,
            delivery_limit=20,
            pool="limits",
            tool_args=("--tools", "tests.helpers.limited_tools"),
        ) as harness:
            yield harness
    finally:
        await drop_schema(target.url, namespace)


def start(harness: HandsHarness, **extra: str) -> None:
    harness.start_worker(HOSTED_LEDGERS=str(harness.tmp_path), **extra)


async def test_a_tool_limited_to_three_never_runs_a_fourth_with_a_hands_killed(
    limits: HandsHarness,
) -> None:
    start(limits)
    start(limits)
    jobs = [limits.job("three_at_once", {"seconds": 0.4}) for _ in range(15)]
    for job in jobs:
        await limits.publish(job)
    await eventually(lambda: len(calls("three_at_once")) >= 4, what="calls to run")
    victim = limits.workers[0]
    victim.send_signal(signal.SIGKILL)  # its calls die mid-run, their slots held
    victim.wait()
    killed_at = time.time()

    for job in jobs:
        op = await limits.outcome(job.operation_id, within=30)
        assert op.status == "succeeded"
    # A call the kill cut short ran until the kill, at the latest.
    spans = [(b, killed_at if e is None else e) for _, b, e in calls("three_at_once")]
    assert most_at_once(spans) == 3  # the limit was reached, and never passed


async def test_a_tool_limited_to_twenty_a_second_holds_it_with_a_hands_killed(
    limits: HandsHarness,
) -> None:
    start(limits)
    start(limits)
    jobs = [limits.job("twenty_a_second", {}) for _ in range(60)]
    for job in jobs:
        await limits.publish(job)
    await eventually(lambda: len(calls("twenty_a_second")) >= 15, what="calls to run")
    limits.workers[0].send_signal(signal.SIGKILL)

    for job in jobs:
        assert (await limits.outcome(job.operation_id, within=30)).status == "succeeded"
    starts = [b for _, b, _ in calls("twenty_a_second")]
    # Killed calls that had begun run again (a safe tool), each passing the rate again.
    assert len(starts) >= 60
    assert most_in_a_second(starts) <= 20
    # A turn every 52.5 ms (1/rate and LATE_AT_MOST); the calls the kill cut short run
    # again once their lease expired and their interruption's backoff passed.
    took = max(starts) - min(starts)
    turns = (len(starts) - 1) * 0.0525
    recovery = limits.lease_ttl_ms / 1000 + 0.25
    assert turns * 0.95 <= took <= turns + recovery + 1.5


async def test_a_limited_tools_waiting_calls_do_not_hold_up_an_unlimited_one(
    limits: HandsHarness,
) -> None:
    start(limits, BRAINHANDS_LIMIT_WAITING="16")
    waiting = [limits.job("one_a_second", {}) for _ in range(10)]
    for job in waiting:
        await limits.publish(job)
    await eventually(lambda: len(calls("one_a_second")) >= 1, what="a first call")
    free = limits.job("unlimited", {})
    sent = time.monotonic()
    await limits.publish(free)

    assert (await limits.outcome(free.operation_id, within=5)).status == "succeeded"
    assert time.monotonic() - sent < 2.0  # the limited calls wait ten seconds in all
    assert len(calls("one_a_second")) <= 3
