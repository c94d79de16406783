"""The ``limits`` soak of ``bench.faults``: tools limited per tool, run by three Hands while
one of them is SIGKILLed and started again every few seconds, judged at the tools' own
ledgers (``tests.helpers.ledgers``).

``twenty_a_second`` (20 calls a second, burst 1) gets ``--limit-calls`` calls at once: they
should take ``calls / 20`` seconds (the issue's bar: 50 s +/- 10% for 1,000) and never more
than 20 begin within any one second. ``three_at_once`` (3 at a time, each 0.3 s) gets a
tenth as many beside them: never a fourth running. The table, one row per tool: its calls,
calls seen twice (re-run after a kill: ``safe`` tools), seconds from the first start to the
last, the most that began within one second and the most that ran at once.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench._services import drop_schemas, run_names
from bench._stats import print_table
from brainhands.shared.config import normalize_database_url
from tests.helpers import ledgers
from tests.helpers.harness import HandsHarness, hands_deployment
from tests.helpers.polling import eventually
from tests.helpers.stores import StoreTarget

HANDS = 3
KILL_EVERY = 7.0
"""Seconds between two SIGKILLs of a Hands (each started again a second later)."""


@dataclass
class LimitsRow:
    tool: str
    limit: str
    calls: int
    duplicates: int
    seconds: float
    most_in_a_second: int
    most_at_once: int


async def soak_limits(args: argparse.Namespace, tmp: Path) -> tuple[list[LimitsRow], int]:
    """The rows of the two tools, and how many Hands were killed."""
    _, namespace, schema = run_names("limits")
    ledgers.LEDGERS = tmp
    target = StoreTarget(normalize_database_url(args.database_url), schema)
    try:
        async with hands_deployment(
            target,
            args.rabbitmq_url,
            args.redis_url,
            namespace,
            tmp,
            delivery_limit=50,
            pool="limits",
            tool_args=("--tools", "tests.helpers.limited_tools"),
        ) as harness:
            for _ in range(HANDS):
                start(harness)
            jobs = [harness.job("twenty_a_second", {}) for _ in range(args.limit_calls)]
            jobs += [
                harness.job("three_at_once", {"seconds": 0.3})
                for _ in range(args.limit_calls // 10)
            ]
            for job in jobs:
                await harness.publish(job)
            kills: list[float] = []
            killer = asyncio.create_task(kill_now_and_then(harness, kills))
            wanted = {job.operation_id for job in jobs}
            try:
                await eventually(
                    lambda: wanted <= {r.operation_id for r in harness.results},
                    within=args.timeout,
                    what="every call's result",
                )
            finally:
                killer.cancel()
    finally:
        await drop_schemas(args.database_url, schema)
    rows = [judge("twenty_a_second", "20/s", kills), judge("three_at_once", "3 at once", kills)]
    return rows, len(kills)


def start(harness: HandsHarness) -> None:
    harness.start_worker(HOSTED_LEDGERS=str(harness.tmp_path))


async def kill_now_and_then(harness: HandsHarness, kills: list[float]) -> None:
    """SIGKILL the oldest live Hands every ``KILL_EVERY`` seconds, start another a second
    later; note when each was killed in ``kills``."""
    while True:
        await asyncio.sleep(KILL_EVERY)
        victim = next(p for p in harness.workers if p.poll() is None)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        kills.append(time.time())
        await asyncio.sleep(1.0)
        start(harness)


def judge(tool: str, limit: str, kills: list[float]) -> LimitsRow:
    calls = ledgers.calls(tool)
    starts = [began for _, began, _ in calls]
    now = time.time()
    # A call that never ended was cut short by a kill: it ran until the first one after it
    # began, at the latest (its Hands may have been another).
    spans = [
        (began, ended if ended is not None else min((k for k in kills if k > began), default=now))
        for _, began, ended in calls
    ]
    seen = Counter(op for op, _, _ in calls)
    return LimitsRow(
        tool,
        limit,
        len(calls),
        sum(n - 1 for n in seen.values()),
        max(starts) - min(starts) if starts else 0.0,
        ledgers.most_in_a_second(starts),
        ledgers.most_at_once(spans),
    )


def report_limits(rows: list[LimitsRow], kills: int) -> None:
    print()
    print_table(
        ["tool", "limit", "calls", "duplicates", "seconds", "most in 1 s", "most at once"],
        [
            [
                r.tool,
                r.limit,
                r.calls,
                r.duplicates,
                f"{r.seconds:.1f}",
                r.most_in_a_second,
                r.most_at_once,
            ]
            for r in rows
        ],
        align="<<>>>>>",
    )
    print(f"limits: {kills} Hands SIGKILLed (one every {KILL_EVERY:.0f} s) of {HANDS} running")
