"""Lease renewal under load: lost leases and renewal lag of Hands processes that kill nothing.

W real ``python -m brainhands hands --pool leasebench --tools bench.lease_tools`` processes
(concurrency C each, lease TTL ``--ttl-ms``) run N calls of the ``unsafe`` tool ``work``,
each taking a random 1-3 s; nothing is killed or paused, so every lost lease is a false
alarm, and under an ``unsafe`` tool it turns into an ``uncertain`` outcome.

Each run counts the workers' ``lease_lost`` log events and the ``uncertain`` results, and
reads two histograms from every worker's ``/metrics`` at its end: how late renewals were
sent against their schedule (``brainhands_lease_renewal_lag_seconds``) and their Redis round
trip (``brainhands_lease_renewal_seconds``). Quantiles are interpolated within buckets, as
PromQL's ``histogram_quantile`` does; "max" is the upper bound of the highest non-empty
bucket.

The loads:

* ``none``: the calls only sleep;
* ``hog``: as many CPU-bound processes as the machine has cores run alongside (a busy host);
* ``busy``: every call keeps its worker's event loop busy ``--burn-ms`` in every 100 ms
  (tools doing CPU work between awaits).

``--code REF ...`` runs the workers from those commits (``git archive`` into a temporary
directory), each on every load, so builds are compared in one run; by default they run
the working tree.

    .venv/bin/python -m bench.lease_renewal [--calls N] [--workers W] [--concurrency C]
        [--ttl-ms T] [--loads none hog busy] [--code REF ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench._services import (
    ROOT,
    Workers,
    add_service_urls,
    clean_namespace,
    extracted,
    log_events,
    new_parser,
    open_store,
    run_names,
    stop_on_sigterm,
    worker_env,
)
from bench._stats import machine, print_table
from bench.lease_tools import COMPAT, POOL, work_job
from brainhands.shared.broker import Broker, Outgoing
from brainhands.shared.delivery import Delivery
from brainhands.shared.messages import Message, ToolResult, encode
from brainhands.shared.topology import Topology

WORKING_TREE = "working tree"
LAG = "brainhands_lease_renewal_lag_seconds"
ROUND_TRIP = "brainhands_lease_renewal_seconds"
BUCKET = re.compile(r'^(\w+)_bucket\{.*le="([^"]+)".*\}\s+(\S+)$')


@dataclass
class Histogram:
    """Cumulative bucket counts by upper bound, summed over processes."""

    buckets: dict[float, float] = field(default_factory=dict)

    def add(self, bound: float, count: float) -> None:
        self.buckets[bound] = self.buckets.get(bound, 0.0) + count

    @property
    def count(self) -> float:
        return self.buckets.get(float("inf"), 0.0)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile, interpolated linearly within its bucket."""
        rank = q * self.count
        lower, below = 0.0, 0.0
        for bound, cumulative in sorted(self.buckets.items()):
            if cumulative >= rank:
                if bound == float("inf"):
                    return lower
                inside = cumulative - below
                return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = bound, cumulative
        return lower

    def top(self) -> float:
        """The upper bound of the highest bucket that holds a sample."""
        below = 0.0
        top = 0.0
        for bound, cumulative in sorted(self.buckets.items()):
            if cumulative > below:
                top = bound
            below = cumulative
        return top


@dataclass
class Run:
    code: str
    load: str
    calls: int
    seconds: float
    lost: int
    statuses: dict[str, int]
    lag: Histogram | None
    round_trip: Histogram | None


def scrape(ports: Sequence[int]) -> dict[str, Histogram]:
    """The bucket counts of every histogram the workers at ``ports`` export, summed."""
    found: dict[str, Histogram] = {}
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        for line in text.splitlines():
            if m := BUCKET.match(line):
                found.setdefault(m[1], Histogram()).add(float(m[2]), float(m[3]))
    return found


@contextlib.contextmanager
def cpu_hogs(load: str) -> Iterator[None]:
    """Under the ``hog`` load, one CPU-bound process per core until the block is left."""
    hogs = []
    if load == "hog":
        hogs = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 1)
        ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@dataclass
class Bench:
    args: argparse.Namespace
    namespace: str
    db_schema: str
    broker: Broker
    logs: Path
    statuses: dict[str, str] = field(default_factory=dict)
    expected: set[str] = field(default_factory=set)
    all_arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def collect(self, message: Message, delivery: Delivery) -> None:
        """The Brain queue's consumer: note each call's latest result."""
        if isinstance(message, ToolResult) and message.operation_id in self.expected:
            self.statuses[message.operation_id] = message.status
            if len(self.statuses) == len(self.expected):
                self.all_arrived.set()
        await delivery.ack()

    async def run(self, code: str, tree: Path, load: str) -> Run:
        args = self.args
        tag = uuid.uuid4().hex[:8]
        burn = args.burn_ms if load == "busy" else 0.0
        jobs = [
            work_job(f"op-{tag}-{i:04d}", random.uniform(*args.seconds), burn)
            for i in range(args.calls)
        ]
        self.expected = {job.operation_id for job in jobs}
        self.statuses = {}
        self.all_arrived = asyncio.Event()
        env = worker_env(
            args,
            self.namespace,
            self.db_schema,
            args.concurrency,
            BRAINHANDS_LEASE_TTL_MS=str(args.ttl_ms),
        )
        argv = ["hands", "--pool", POOL, "--tools", "bench.lease_tools"]
        with Workers(env, self.logs / f"{tag}", code=tree) as running:
            for i in range(args.workers):
                running.start(*argv, log=f"hands-{i}.log")
            await running.wait_consuming()
            ports = [
                int(e["port"])
                for path in running.paths("hands")
                for e in log_events(path)
                if e.get("event") == "health_listening"
            ]
            with cpu_hogs(load):
                started = time.monotonic()
                outcomes = await self.broker.publish_many(
                    [Outgoing(encode(job), self.broker.topology.hands_queue(POOL)) for job in jobs]
                )
                if any(o is not None for o in outcomes):
                    raise RuntimeError(f"jobs not published: {outcomes}")
                try:
                    await asyncio.wait_for(self.all_arrived.wait(), timeout=args.timeout)
                except TimeoutError:
                    raise RuntimeError(
                        f"{code}, {load}: {len(self.statuses)} of {args.calls} results within "
                        f"{args.timeout}s"
                    ) from None
                seconds = time.monotonic() - started
            histograms = scrape(ports)
        events = [e for path in running.paths("hands") for e in log_events(path)]
        lost = sum(e.get("event") == "lease_lost" for e in events)
        counted: dict[str, int] = {}
        for status in self.statuses.values():
            counted[status] = counted.get(status, 0) + 1
        return Run(
            code,
            load,
            args.calls,
            seconds,
            lost,
            counted,
            histograms.get(LAG),
            histograms.get(ROUND_TRIP),
        )


def milliseconds(histogram: Histogram | None) -> list[str]:
    if histogram is None or not histogram.count:
        return ["n/a"] * 3
    return [
        f"{histogram.quantile(0.5) * 1000:.1f}",
        f"{histogram.quantile(0.99) * 1000:.1f}",
        f"<= {histogram.top() * 1000:.0f}",
    ]


def report(runs: Sequence[Run], args: argparse.Namespace) -> None:
    rows = [
        [
            r.code,
            r.load,
            r.calls,
            r.lost,
            r.statuses.get("uncertain", 0),
            f"{r.lag.count:.0f}" if r.lag else "n/a",
            *milliseconds(r.lag),
            *milliseconds(r.round_trip),
            f"{r.seconds:.1f}",
        ]
        for r in runs
    ]
    print()
    print_table(
        [
            "code",
            "load",
            "calls",
            "lost leases",
            "uncertain",
            "renewals",
            "lag p50 ms",
            "lag p99 ms",
            "lag max ms",
            "rtt p50 ms",
            "rtt p99 ms",
            "rtt max ms",
            "wall s",
        ],
        rows,
        align="<<>>>>>>>>>>>",
    )
    print()
    print(
        f"{args.workers} Hands processes x concurrency {args.concurrency}, lease TTL "
        f"{args.ttl_ms} ms, calls of {args.seconds[0]:g}-{args.seconds[1]:g} s (unsafe), "
        f"busy load {args.burn_ms:g} ms per 100 ms; {machine()}"
    )
    print(
        "renewals: lag observations (renewal requests, or rounds of them); lag: how late a "
        "renewal was sent against its schedule; rtt: its Redis round trip"
    )


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    _, namespace, db_schema = run_names("leaserenewal")
    print(
        f"lease renewal: {args.calls} calls per run, code {args.code}, loads {args.loads}; "
        f"namespace {namespace}, PostgreSQL schema {db_schema}",
        flush=True,
    )
    runs: list[Run] = []
    topology = Topology(namespace)
    try:
        store = await open_store(args.database_url, db_schema)
        await store.close()
        broker = await Broker.connect(args.rabbitmq_url, topology, connection_name=namespace)
        try:
            with tempfile.TemporaryDirectory(prefix="brainhands-bench-lease-") as tmp:
                bench = Bench(args, namespace, db_schema, broker, Path(tmp))
                await topology.declare_hands_pool(broker.channel, POOL)
                # Results: older builds of the code under test publish them to the wake-up queue.
                for queue in (
                    await topology.declare_brain(broker.channel, COMPAT),
                    await topology.declare_results(broker.channel, COMPAT),
                ):
                    await broker.consume(queue, bench.collect, prefetch=256)
                for ref in args.code:
                    with contextlib.ExitStack() as stack:
                        tree = ROOT if ref == WORKING_TREE else stack.enter_context(extracted(ref))
                        for load in args.loads:
                            runs.append(await bench.run(ref, tree, load))
                            r = runs[-1]
                            print(
                                f"  {ref}, {load}: {r.lost} lost leases, {r.seconds:.1f} s",
                                flush=True,
                            )
        finally:
            await broker.close()
        report(runs, args)
    finally:
        queues = [topology.hands_queue(POOL), *topology.brain_queues(COMPAT)]
        await clean_namespace(args, namespace, queues, [db_schema])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--calls", type=int, default=200, help="tool calls per run")
    parser.add_argument("--workers", type=int, default=3, help="Hands processes")
    parser.add_argument("--concurrency", type=int, default=32, help="calls per process")
    parser.add_argument("--ttl-ms", type=int, default=2000, help="lease TTL of the workers")
    parser.add_argument(
        "--seconds", type=float, nargs=2, default=[1.0, 3.0], help="range of a call's duration"
    )
    parser.add_argument(
        "--loads", nargs="+", choices=["none", "hog", "busy"], default=["none", "hog", "busy"]
    )
    parser.add_argument(
        "--burn-ms", type=float, default=10.0, help="busy load: CPU ms per 100 ms of a call"
    )
    parser.add_argument(
        "--code", nargs="+", default=[WORKING_TREE], help="commits to run the workers from"
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds a run may take")
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    args = parser.parse_args(argv)
    if min(args.calls, args.workers, args.concurrency, args.ttl_ms) < 1:
        parser.error("--calls, --workers, --concurrency and --ttl-ms must be positive")
    return args


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main(parse_args()))
