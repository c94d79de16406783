"""What sharing transactions between tool calls would buy: the floor's throughput by batch size.

The design commits per session, so one tool call's round trip needs its own commits,
confirmed publishes and leases; ``bench/roundtrip.py`` (part 3b) measures how many such
round trips the machine does with raw drivers, in 8 lanes at once: about a third of a
Celery no-op task's throughput on the 2-core test machine. Here the same lanes carry B
calls of B sessions through every step together (``BatchedFloor`` in
``bench/roundtrip_floor.py``: one statement per step for all B, one Redis pipeline, one
wave of confirmed publishes), for each B of ``--batches`` (1: the floor as it is), next to
Celery's no-op throughput measured in the same run (when Celery is installed).

It answers one question for the design: whether group commit -- several sessions' commits
in one transaction -- could carry a tool call past Celery's throughput on this machine.

    .venv/bin/python -m bench.floor_batched [--batches 1,8,32,128] [--calls N] [--no-celery]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from pathlib import Path

from bench._services import (
    add_service_urls,
    asyncpg_dsn,
    clean_namespace,
    new_parser,
    open_store,
    run_names,
    stop_on_sigterm,
)
from bench._stats import machine, print_table
from bench.roundtrip_celery import bench_celery_variant, celery_available
from bench.roundtrip_floor import FLOOR_PROCESSES, FloorRate, floor_queues, floor_throughput
from brainhands.shared.topology import Topology


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    tag, namespace, schema = run_names("floorbatched")
    print(f"floor_batched bench on {machine()}; namespace {namespace}", flush=True)
    rates: dict[int, FloorRate] = {}
    try:
        store = await open_store(args.database_url, schema)
        await store.close()
        for batch in args.batches:
            print(
                f"batch {batch}: {args.floor_burst} calls, {args.floor_lanes} lanes at once in "
                f"{FLOOR_PROCESSES} processes",
                flush=True,
            )
            dsn = asyncpg_dsn(args.database_url)
            rates[batch] = await floor_throughput(args, namespace, dsn, schema, batch)
    finally:
        queues = floor_queues(Topology(namespace), args.floor_lanes)
        await clean_namespace(args, namespace, queues, [schema])
    celery_rate = None
    if args.no_celery or not celery_available():
        print("Celery: skipped (--no-celery, or not installed)", flush=True)
    else:
        with tempfile.TemporaryDirectory(prefix="brainhands-bench-floor-batched-") as logs:
            celery = await bench_celery_variant(
                args, f"benchfloorbatched_celery_{tag}", False, Path(logs)
            )
        celery_rate = celery.burst / celery.burst_seconds
    base = rates[args.batches[0]].rate
    rows = [
        [
            batch,
            f"{r.rate:,.1f}",
            f"{r.cpu * 1000:.2f}",
            f"{r.rate / base:.2f}x",
            f"{r.rate / celery_rate:.2f}x" if celery_rate else "-",
        ]
        for batch, r in rates.items()
    ]
    if celery_rate:
        rows.append(["celery no-op (as it comes)", f"{celery_rate:,.1f}", "-", "-", "1.00x"])
    print()
    print_table(
        [
            "calls per transaction",
            "calls/s",
            "CPU ms per call",
            f"vs batch {args.batches[0]}",
            "vs celery",
        ],
        rows,
        align="<>>>>",
    )
    print()
    print(f"({machine()})")


def parse_args() -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument(
        "--batches",
        type=lambda v: [int(n) for n in v.split(",")],
        default=[1, 8, 32, 128],
        help="calls per batch, comma-separated (default 1,8,32,128)",
    )
    parser.add_argument(
        "--calls", dest="floor_burst", type=int, default=3072, help="calls per batch size"
    )
    parser.add_argument("--lanes", dest="floor_lanes", type=int, default=4, help="lanes at once")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a part may take")
    parser.add_argument("--no-celery", action="store_true", help="skip Celery")
    parser.add_argument("--celery-serial", type=int, default=50, help="Celery serial tasks")
    parser.add_argument("--celery-burst", type=int, default=1000, help="Celery tasks at once")
    parser.add_argument(
        "--celery-concurrency", type=int, default=2, help="Celery prefork processes"
    )
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    parser.set_defaults(warmup=5)  # unmeasured Celery round trips, x4
    args = parser.parse_args()
    if min(args.batches) < 1 or args.floor_lanes < 1:
        parser.error("batches and --lanes must be positive")
    if args.floor_burst < args.floor_lanes * max(args.batches):
        parser.error("--calls must be at least --lanes x the largest batch")
    return args


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main(parse_args()))
