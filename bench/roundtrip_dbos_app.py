"""The DBOS app of ``bench.roundtrip``: no-op workflows, measured in a process of their own.

DBOS Transact is not a dependency of brainhands: install it into the venv to get these rows
(``.venv/bin/pip install 'dbos>=3,<4'``). ``bench/roundtrip_dbos.py`` runs

    python -m bench.roundtrip_dbos_app --system-database-url URL --result PATH ...

on a system database of the run's own, and reads the JSON object it writes to ``PATH``.

A "tool call" is one no-op step: ``one_call`` is a workflow of one step, ``fan_out`` one of
``--fanout-calls`` steps started at once (``asyncio.gather``), as a model turn asks for
several tools. Both are ``async``, like everything on brainhands' side. In order:

1. ``--serial`` ``one_call`` workflows one after another: ``start_workflow_async`` and
   ``get_result`` of each, timed on the client (after ``4 x --warmup`` unmeasured ones, and
   as many through the queue, which wait for its worker thread to come up);
2. ``--burst`` of them started at once, directly (each runs in this process as soon as its
   status row is written), then ``--burst`` enqueued at once on a ``Queue`` without limits
   (its worker thread dequeues them, polling every ``QUEUE_POLLING_SEC``);
3. ``--fanout`` ``fan_out`` workflows the same two ways (skipped if 0).

A burst's clock runs from before the first start to the last workflow's ``updated_at`` (the
commit of its result), as brainhands' burst runs to the last submission's ``updated_at``:
the finish is read every ``POLL`` seconds from the workflow status table (only the workflows
not yet seen final), so neither DBOS's result polling (1 s by default) nor a poll per
workflow is measured. Before the bursts its tables are analyzed, as brainhands' are.

With ``--meter-dsn`` (the bench's own PostgreSQL server), the serial one-step workflows, the
one-step burst started directly and the fan-out burst started directly are each counted as
brainhands' parts are (``bench/roundtrip_counts.py``: transaction ids consumed, statements,
the server's CPU), with this process's CPU (all its threads) beside; the burst's polls of
the workflow status table connect as the observer role (``--observer-url``), left out as
the bench's own polls of brainhands' sessions are. The queue's worker thread polls all the
while, as DBOS's background: counted, as brainhands' sweepers and relays are.

Settings beyond DBOS's defaults: warnings-only logs, a fixed application version, and a
queue polling interval of ``QUEUE_POLLING_SEC`` (DBOS's default is 1 s, which would leave a
burst waiting for the first poll).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from dbos import DBOS, DBOSConfig, WorkflowHandleAsync

from bench.roundtrip_counts import TAIL, Meter
from bench.roundtrip_servers import OBSERVER

APP = "brainhands-bench-roundtrip"
QUEUE = "bench_roundtrip"
QUEUE_POLLING_SEC = 0.05
ACTIVE = ("PENDING", "ENQUEUED", "DELAYED")
"""Workflow statuses that are not final."""
POLL = 0.2
"""Seconds between a burst's polls for its finished workflows (as brainhands' burst)."""


@DBOS.step()
async def noop() -> None:
    """Do nothing: a step costs only what DBOS adds (its checkpoint)."""


@DBOS.workflow()
async def one_call() -> None:
    await noop()


@DBOS.workflow()
async def fan_out(calls: int) -> None:
    await asyncio.gather(*(noop() for _ in range(calls)))


Start = Callable[[], Awaitable[WorkflowHandleAsync[None]]]
_T = TypeVar("_T")


async def serial(n: int) -> list[float]:
    """Seconds each of ``n`` ``one_call`` workflows took, one after another."""
    perf = time.perf_counter
    samples = []
    for _ in range(n):
        t0 = perf()
        handle = await DBOS.start_workflow_async(one_call)
        await handle.get_result()
        samples.append(perf() - t0)
    return samples


async def burst(db: psycopg.AsyncConnection[Any], start: Start, n: int, within: float) -> float:
    """Start ``n`` workflows at once; seconds from the first start until the last one's
    result was committed."""
    started = time.time()
    handles = await asyncio.gather(*(start() for _ in range(n)))
    pending = {h.get_workflow_id() for h in handles}
    deadline = time.monotonic() + within
    last = 0
    while True:
        # Only the workflows not yet seen final, as brainhands' burst polls its sessions.
        cursor = await db.execute(
            "SELECT w.workflow_uuid, w.updated_at FROM dbos.workflow_status w "
            "JOIN unnest(%s::text[]) AS p(id) ON w.workflow_uuid = p.id "
            "WHERE w.status <> ALL(%s)",
            (list(pending), list(ACTIVE)),
        )
        for workflow_id, updated_at in await cursor.fetchall():
            pending.discard(workflow_id)
            last = max(last, updated_at)
        if not pending:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n - len(pending)} of {n} workflows finished within {within}s")
        await asyncio.sleep(POLL)
    # Raises if any failed; all are final, so the queue's handles answer on their first poll.
    await asyncio.gather(*(h.get_result() for h in handles))
    return float(last) / 1000 - started


class Parts:
    """What the counted parts asked of the store (``bench/roundtrip_counts.py``), with this
    process's CPU, when the bench runs the app on its own servers (``--meter-dsn``)."""

    def __init__(self, meter: Meter | None) -> None:
        self.meter = meter
        self.counts: dict[str, dict[str, float]] = {}

    async def counted(self, name: str, n: int, part: Awaitable[_T]) -> _T:
        """Run ``part`` (``n`` calls), counting what it asked for under ``name``."""
        if self.meter is None:
            return await part
        cpu, start = time.process_time(), await self.meter.read()
        done = await part
        await asyncio.sleep(TAIL)
        counts = (await self.meter.read()).minus(start).as_dict()
        self.counts[name] = {**counts, "app_cpu": time.process_time() - cpu, "n": n}
        return done


async def measure(args: argparse.Namespace, meter: Meter | None) -> dict[str, Any]:
    queue = await DBOS.register_queue_async(QUEUE, polling_interval_sec=QUEUE_POLLING_SEC)
    parts = Parts(meter)

    def direct(*call: Any) -> Start:
        return lambda: DBOS.start_workflow_async(*call)

    def queued(*call: Any) -> Start:
        return lambda: queue.enqueue_async(*call)

    for _ in range(args.warmup * 4):
        await (await DBOS.start_workflow_async(one_call)).get_result()
        await (await queue.enqueue_async(one_call)).get_result(polling_interval_sec=0.01)
    samples = await parts.counted("serial", args.serial, serial(args.serial))
    result: dict[str, Any] = {"samples": samples, "burst": args.burst}
    result["queue_polling_sec"] = QUEUE_POLLING_SEC
    # The harness's polls run as the observer where there is one: not counted as DBOS's work.
    async with await psycopg.AsyncConnection.connect(
        args.observer_url or args.system_database_url, autocommit=True
    ) as db:
        if meter is not None:
            cursor = await db.execute("SELECT pg_backend_pid()")
            meter.excluded.add(int((await cursor.fetchall())[0][0]))
        # As brainhands' bench does for its store: statistics, as on a system that has run.
        await db.execute("ANALYZE dbos.workflow_status, dbos.operation_outputs")
        result["direct_seconds"] = await parts.counted(
            "burst", args.burst, burst(db, direct(one_call), args.burst, args.timeout)
        )
        result["queue_seconds"] = await burst(db, queued(one_call), args.burst, args.timeout)
        result["fanout"] = args.fanout
        result["fanout_calls"] = args.fanout_calls
        if args.fanout:
            fanned = (fan_out, args.fanout_calls)
            steps = args.fanout * args.fanout_calls
            result["fanout_direct_seconds"] = await parts.counted(
                "fanout", steps, burst(db, direct(*fanned), args.fanout, args.timeout)
            )
            result["fanout_queue_seconds"] = await burst(
                db, queued(*fanned), args.fanout, args.timeout
            )
    result["counts"] = parts.counts or None
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Launch DBOS, measure, and shut it down."""
    config: DBOSConfig = {
        "name": APP,
        "system_database_url": args.system_database_url,
        "application_version": "bench",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    async with contextlib.AsyncExitStack() as stack:
        meter = None
        if args.meter_dsn:
            meter = Meter(args.meter_dsn, args.database, args.postmaster_pid, None, OBSERVER)
            await stack.enter_async_context(meter)
        try:
            DBOS.launch()
            return await measure(args, meter)
        finally:
            DBOS.destroy()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--system-database-url", required=True, help="postgresql://... (empty)")
    parser.add_argument("--result", required=True, help="write the JSON result to this file")
    parser.add_argument("--serial", type=int, default=100, help="serial workflows")
    parser.add_argument("--burst", type=int, default=300, help="one-step workflows at once")
    parser.add_argument("--fanout", type=int, default=60, help="fan-out workflows at once")
    parser.add_argument("--fanout-calls", type=int, default=10, help="steps per fan-out workflow")
    parser.add_argument("--warmup", type=int, default=5, help="4x this many unmeasured first")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a burst may take")
    parser.add_argument("--meter-dsn", help="count the parts on this server (its postgres db)")
    parser.add_argument("--database", help="with --meter-dsn: the system database's name")
    parser.add_argument("--postmaster-pid", type=int, default=0, help="with --meter-dsn")
    parser.add_argument("--observer-url", help="the harness's polls connect as this role")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args()
    Path(arguments.result).write_text(json.dumps(asyncio.run(run(arguments))))
