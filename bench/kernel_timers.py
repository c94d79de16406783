"""Part 2 of ``bench.kernel``: 1,000 due timers.

Brain worker processes (``--tasks bench.kernel_tasks``) put S sessions to sleep until the
same moment T; from T on their in-memory timers (and the sweeper) wake them. See
``bench/kernel.py`` for the whole story.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select

from bench._services import Workers, clean_namespace, log_events, open_store, worker_env
from bench._stats import percentile, print_table
from bench.kernel_tasks import COMPAT, NAP_KIND
from brainhands.shared.broker import Broker
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.store import Store
from brainhands.shared.store import schema as tables
from brainhands.shared.topology import Topology
from tests.helpers.submitting import submit_input

PILOT_SESSIONS = 50
TASKS_MODULE = "bench.kernel_tasks"
ms = 1000.0


@dataclass
class AfterT:
    """What the workers' logs say happened from T until the last task finished."""

    woken: int = 0
    busy: int = 0
    sweeper: int = 0
    """Wake-ups the sweeper sent from T on (until the workers stopped)."""
    armed: int = 0
    """Passes before T that ended with a timer for T (each arms one in-memory timer)."""
    swept_before: int = 0
    """Wake-ups the sweeper sent before T."""
    useful: list[float] = field(default_factory=list)
    """Seconds from delivery to done of each pass that ran a phase."""
    idle: list[float] = field(default_factory=list)
    """The same for passes that found nothing to run (duplicate wake-ups)."""


@dataclass
class TimerResult:
    workers: int
    sessions: int
    lead: float
    asleep_after: float
    """Seconds from the first submission until every task slept."""
    t: float
    finish: list[float]
    """Per session: the ``Finish`` commit's time minus T."""
    woke: list[float]
    """Per session: the start of its ``wake`` phase minus T."""
    events: AfterT = field(default_factory=AfterT)


async def count_naps(store: Store, prefix: str, status: str) -> int:
    t = tables.task
    async with store.backend.snapshot() as conn:
        found = await conn.execute(
            select(func.count()).where(
                t.c.kind == NAP_KIND, t.c.session_id.like(f"{prefix}-%"), t.c.status == status
            )
        )
        return int(found.scalar_one())


async def submit_naps(
    store: Store, topology: Topology, prefix: str, sessions: int, until: float
) -> None:
    gate = asyncio.Semaphore(16)

    async def one(n: int) -> None:
        async with gate:
            await submit_input(
                store,
                topology,
                session_id=f"{prefix}-{n:05d}",
                request_id="nap",
                input={"kind": NAP_KIND, "input": {"until": until}},
                compat=COMPAT,
            )

    await asyncio.gather(*(one(n) for n in range(sessions)))


async def wait_for_naps(
    store: Store, workers: Workers, prefix: str, sessions: int, status: str, deadline: float
) -> int:
    """Poll until ``sessions`` nap tasks of ``prefix`` are in ``status``; the count at the
    deadline if they are not."""
    while (count := await count_naps(store, prefix, status)) < sessions:
        workers.check_alive()
        if time.time() > deadline:
            return count
        await asyncio.sleep(0.1)
    return count


async def auto_lead(store: Store, topology: Topology, workers: Workers, sessions: int) -> float:
    """Time a pilot batch from submission to sleep, and give the real batch twice its pace
    (plus 5 s) to fall asleep before T. The pilot's timers fire at once; it finishes first."""
    pilot = min(PILOT_SESSIONS, sessions)
    start = time.time()
    await submit_naps(store, topology, "pilot", pilot, start)
    if await wait_for_naps(store, workers, "pilot", pilot, "terminal", start + 60) < pilot:
        raise RuntimeError(f"the pilot's {pilot} sessions did not finish within 60 s")
    # Each pilot session went to sleep and woke: half the time is a fair estimate of sleep.
    pace = (time.time() - start) / 2 / pilot
    lead = max(5.0, 2 * pace * sessions + 5.0)
    print(
        f"  pilot: {pilot} sessions submitted, asleep and finished in "
        f"{time.time() - start:.1f} s; T set {lead:.0f} s after the first submission",
        flush=True,
    )
    return lead


def after_t_events(paths: Sequence[Path], t: float, until: float) -> AfterT:
    out = AfterT()
    for path in paths:
        for e in log_events(path):
            ts, event = e.get("ts"), e.get("event")
            if not isinstance(ts, int | float):
                continue
            wake = e.get("next_wake")
            if event == "advanced" and ts < t and isinstance(wake, float) and abs(wake - t) < 1e-3:
                out.armed += 1
            # The line that ends a delivery says when the delivery was taken.
            since = e.get("received_at")
            if isinstance(since, int | float) and t <= since <= until:
                out.woken += 1
                if event == "busy":
                    out.busy += 1
                elif event == "advanced":
                    (out.useful if e.get("phases") else out.idle).append(ts - since)
            if event == "swept":
                sent = int(e.get("session_woken", 0))
                if ts >= t:
                    out.sweeper += sent
                else:
                    out.swept_before += sent
    return out


async def bench_timers(args: argparse.Namespace, namespace: str, db_schema: str) -> TimerResult:
    print(
        f"2. due timers: {args.sessions} sessions, {args.workers} Brain worker process(es); "
        f"namespace {namespace}, PostgreSQL schema {db_schema}",
        flush=True,
    )
    topology = Topology(namespace)
    try:
        store = await open_store(args.database_url, db_schema)
        try:
            broker = await Broker.connect(args.rabbitmq_url, topology, connection_name=namespace)
            try:
                await topology.declare_brain(broker.channel, COMPAT)
                relay = OutboxRelay(store, broker, poll_interval=0.2)
                store.add_commit_listener(relay.wake)
                relay_stop = asyncio.Event()
                relay_task = asyncio.create_task(relay.run(relay_stop))
                env = worker_env(
                    args, namespace, db_schema, args.concurrency, BRAINHANDS_SWEEPER_PERIOD="1"
                )
                with (
                    tempfile.TemporaryDirectory(prefix="brainhands-bench-kernel-") as tmp,
                    Workers(env, Path(args.logs or tmp)) as workers,
                ):
                    try:
                        for _ in range(args.workers):
                            workers.start("brain", "--compat", COMPAT, "--tasks", TASKS_MODULE)
                        await workers.wait_consuming()
                        result = await measure_timers(args, store, topology, workers)
                    finally:
                        relay_stop.set()
                        await relay_task
                        workers.stop()
                    # Read the logs once the workers are gone: a sweep logs when it ends.
                    result.events = after_t_events(
                        workers.paths("brain"), result.t, result.t + max(result.finish)
                    )
                    return result
            finally:
                await broker.close()
        finally:
            await store.close()
    finally:
        await clean_namespace(args, namespace, [topology.brain_queue(COMPAT)], [db_schema])


async def measure_timers(
    args: argparse.Namespace, store: Store, topology: Topology, workers: Workers
) -> TimerResult:
    sessions = args.sessions
    lead = args.lead or await auto_lead(store, topology, workers, sessions)
    start = time.time()
    t = start + lead
    await submit_naps(store, topology, "nap", sessions, t)
    print(f"  {sessions} submitted in {time.time() - start:.1f} s", flush=True)
    asleep = await wait_for_naps(store, workers, "nap", sessions, "sleeping", t - 0.5)
    if asleep < sessions:
        raise RuntimeError(
            f"only {asleep} of {sessions} tasks were asleep half a second before T; "
            f"give them more time with --lead (T was {lead:.0f} s after the first submission)"
        )
    asleep_after = time.time() - start
    print(f"  all {sessions} asleep {asleep_after:.1f} s after the first submission", flush=True)
    done = await wait_for_naps(store, workers, "nap", sessions, "terminal", t + args.timeout)
    if done < sessions:
        raise RuntimeError(f"{done} of {sessions} finished within {args.timeout} s of T")
    tk = tables.task
    async with store.backend.snapshot() as conn:
        rows = (
            await conn.execute(
                select(tk.c.updated_at, tk.c.result, tk.c.outcome).where(
                    tk.c.kind == NAP_KIND, tk.c.session_id.like("nap-%")
                )
            )
        ).all()
    failed = [r for r in rows if r.outcome != "succeeded"]
    if failed or len(rows) != sessions:
        raise RuntimeError(f"{len(rows)} nap tasks, {len(failed)} not succeeded")
    return TimerResult(
        workers=args.workers,
        sessions=sessions,
        lead=lead,
        asleep_after=asleep_after,
        t=t,
        finish=[r.updated_at - t for r in rows],
        woke=[r.result["woke_at"] - t for r in rows],
    )


def report_timers(result: TimerResult) -> None:
    fin, woke = result.finish, result.woke
    rows: list[list[object]] = [
        [
            result.workers,
            result.sessions,
            f"{max(fin):.2f}",
            f"{min(fin):.3f}",
            f"{percentile(fin, 50):.2f}",
            f"{percentile(fin, 99):.2f}",
            f"{percentile(woke, 50):.2f}",
            f"{percentile(woke, 99):.2f}",
            f"{result.sessions / max(fin):,.0f}",
        ]
    ]
    print()
    print_table(
        [
            "workers",
            "sessions",
            "T -> last finish s",
            "T -> first s",
            "finish-T p50 s",
            "p99 s",
            "wake start-T p50 s",
            "p99 s",
            "sessions/s",
        ],
        rows,
        align=">" * 9,
    )
    print()
    e = result.events
    print(
        f"T was {result.lead:.0f} s after the first submission; all slept after "
        f"{result.asleep_after:.1f} s. Before T the sweeper sent {e.swept_before} wake-ups "
        f"and {e.armed} passes armed an in-memory timer for T ({result.sessions} sessions). "
        f"From T until the last finish {e.woken} wake-ups were delivered ({e.busy} found the "
        f"session busy); sweeps that ended after T sent {e.sweeper}."
    )
    useful, idle = sum(e.useful), sum(e.idle)
    if e.useful or e.idle:
        print_table(
            [
                "passes, T to last finish",
                "count",
                "delivery -> done p50 ms",
                "p99 ms",
                "slot-seconds",
            ],
            [
                [
                    label,
                    len(samples),
                    f"{percentile(samples, 50) * ms:.0f}" if samples else "-",
                    f"{percentile(samples, 99) * ms:.0f}" if samples else "-",
                    f"{sum(samples):.1f}",
                ]
                for label, samples in (("ran the wake phase", e.useful), ("found nothing", e.idle))
            ],
            align="<>>>>",
        )
        print(
            f"{idle / (useful + idle):.0%} of the consumer slots' busy time went to passes "
            f"that found nothing to do (slot-seconds: sum over passes of delivery -> done; "
            f"each worker has BRAINHANDS_CONCURRENCY slots)"
        )
