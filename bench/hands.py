"""Hands throughput: no-op tool jobs per second through 1, 2 and 4 worker processes.

Each worker is a real ``python -m brainhands hands --pool bench --tools bench.noop_tools``
process on a PostgreSQL store, so a job pays for everything the runtime does around a tool
call: the operation lease (Redis), the fence claim, ``started`` and the outcome with its
result event (three store transactions), the embedded relay publishing that event, the ack
and the JSON log lines.

For each worker count: start the workers and wait until they consume, then publish J jobs
(``ToolJob``, unique operation ids, pool and compat ``bench``) to the pool's queue with the
Broker; the clock runs from the first publish until J ``ToolResult`` events arrived on the
result queue ``{ns}.results.bench``. Publishing confirmed messages is an order of magnitude
faster than the workers, so the queue fills up almost at once. The per-job latency is
``finished_at - created_at`` of each operation row: from the fence claim's statement to
the outcome's, the store's part of a job (receipt and ack are logged at DEBUG only).

The baseline is a bare aio-pika consumer in this process that acks each of J messages
pre-published to a quorum queue of the same kind, with prefetch equal to the workers'
concurrency: the ceiling the broker alone sets (its latency is receive -> ack returned).
The scaling curve also shows the workers' CPU per job (from /proc). With ``--rounds`` the
variants repeat in rotating order and the table shows the median rate.

    .venv/bin/python -m bench.hands [--jobs J] [--workers 1 2 4] [--concurrency C] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aio_pika
import asyncpg
from aio_pika.abc import AbstractIncomingMessage

from bench._rounds import rotated
from bench._services import (
    Workers,
    add_service_urls,
    asyncpg_dsn,
    clean_namespace,
    new_parser,
    open_store,
    process_cpu,
    run_names,
    stop_on_sigterm,
    worker_env,
)
from bench._stats import percentile, print_table
from bench.noop_tools import COMPAT, POOL, noop_job
from brainhands.shared.broker import Broker, Outgoing
from brainhands.shared.delivery import Delivery
from brainhands.shared.messages import Message, ToolResult, encode
from brainhands.shared.topology import Topology

BASELINE_POOL = "baseline"
PUBLISH_BATCH = 200


@dataclass
class Run:
    label: str
    workers: int
    jobs: int
    seconds: float
    latencies: list[float]
    """Seconds per job: the workers' from the fence claim to the outcome (store times), the
    baseline's from receipt to ack."""
    cpu: float | None = None
    """CPU seconds the worker processes spent on the run, summed (None: unknown)."""

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


@dataclass
class Bench:
    args: argparse.Namespace
    namespace: str
    db_schema: str
    broker: Broker
    logs: Path
    expected: set[str] = field(default_factory=set)
    arrived: set[str] = field(default_factory=set)
    all_arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def topology(self) -> Topology:
        return self.broker.topology

    async def collect(self, message: Message, delivery: Delivery) -> None:
        """The Brain queue's consumer: note each result of the current run."""
        if isinstance(message, ToolResult) and message.operation_id in self.expected:
            self.arrived.add(message.operation_id)
            if len(self.arrived) == len(self.expected):
                self.all_arrived.set()
        await delivery.ack()


async def claim_to_outcome(bench: Bench, operation_ids: Sequence[str]) -> list[float]:
    """Per operation, its row's ``finished_at - created_at``: from the fence claim's statement
    to the outcome's (the workers log receipt and ack at DEBUG only)."""
    db = await asyncpg.connect(
        asyncpg_dsn(bench.args.database_url), server_settings={"search_path": bench.db_schema}
    )
    try:
        rows = await db.fetch(
            "SELECT created_at, finished_at FROM operation WHERE operation_id = ANY($1::text[])",
            list(operation_ids),
        )
    finally:
        await db.close()
    done = [r["finished_at"] - r["created_at"] for r in rows if r["finished_at"] is not None]
    if len(done) != len(operation_ids):
        raise RuntimeError(f"{len(operation_ids) - len(done)} operations have no outcome")
    return done


async def publish(broker: Broker, queue: str, bodies: Sequence[bytes]) -> None:
    for start in range(0, len(bodies), PUBLISH_BATCH):
        outcomes = await broker.publish_many(
            [Outgoing(b, queue) for b in bodies[start : start + PUBLISH_BATCH]]
        )
        failed = [o for o in outcomes if o is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} jobs not published: {failed[0]}")


async def run_workers(bench: Bench, workers: int) -> Run:
    """Start ``workers`` processes, push J jobs through them, stop them."""
    n = bench.args.jobs
    argv = ["hands", "--pool", POOL, "--tools", "bench.noop_tools"]
    argv += ["--concurrency", str(bench.args.concurrency)]
    with Workers(worker_env(bench.args, bench.namespace, bench.db_schema), bench.logs) as running:
        for i in range(workers):
            running.start(*argv, log=f"w{workers}-{i}.log")
        await running.wait_consuming()
        procs = [w.proc for w in running.procs]
        run_tag = uuid.uuid4().hex[:8]
        operation_ids = [f"op-{run_tag}-{i:06d}" for i in range(n)]
        bodies = [encode(noop_job(op)) for op in operation_ids]
        bench.expected = set(operation_ids)
        bench.arrived = set()
        bench.all_arrived = asyncio.Event()
        cpu_before = [process_cpu(proc.pid) for proc in procs]
        started = time.perf_counter()
        await publish(bench.broker, bench.topology.hands_queue(POOL), bodies)
        try:
            await asyncio.wait_for(bench.all_arrived.wait(), timeout=bench.args.timeout)
        except TimeoutError:
            raise RuntimeError(
                f"{workers} worker(s): {len(bench.arrived)} of {n} results within "
                f"{bench.args.timeout}s"
            ) from None
        seconds = time.perf_counter() - started
        cpu_after = [process_cpu(proc.pid) for proc in procs]
    latencies = await claim_to_outcome(bench, operation_ids)
    cpu = None
    before = [c for c in cpu_before if c is not None]
    after = [c for c in cpu_after if c is not None]
    if len(before) == len(after) == workers:
        cpu = sum(after) - sum(before)
    return Run("brainhands hands", workers, n, seconds, latencies, cpu)


async def run_baseline(bench: Bench) -> Run:
    """A bare aio-pika consume+ack loop over J pre-published messages."""
    n = bench.args.jobs
    queue_name = await bench.topology.declare_hands_pool(bench.broker.channel, BASELINE_POOL)
    bodies = [encode(noop_job(f"op-base-{i:06d}", BASELINE_POOL)) for i in range(n)]
    await publish(bench.broker, queue_name, bodies)
    latencies: list[float] = []
    done = asyncio.Event()
    perf = time.perf_counter

    async def on_message(message: AbstractIncomingMessage) -> None:
        received = perf()
        await message.ack()
        latencies.append(perf() - received)
        if len(latencies) == n:
            done.set()

    connection = await aio_pika.connect(bench.args.rabbitmq_url)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=bench.args.concurrency)
        queue = await channel.declare_queue(queue_name, passive=True)
        started = perf()
        tag = await queue.consume(on_message)
        await asyncio.wait_for(done.wait(), timeout=bench.args.timeout)
        seconds = perf() - started
        await queue.cancel(tag)
    return Run("bare aio-pika consume+ack", 1, n, seconds, latencies)


async def measure(bench: Bench, runs: list[Run]) -> None:
    """Every round: the baseline, then each worker count (in rotating order)."""
    counts = list(bench.args.workers)
    for r in range(bench.args.rounds):
        if not bench.args.no_baseline:
            runs.append(await run_baseline(bench))
            print(f"  round {r + 1}: {runs[-1].label}: {runs[-1].rate:,.0f} jobs/s", flush=True)
        for workers in rotated(counts, r):
            runs.append(await run_workers(bench, workers))
            print(
                f"  round {r + 1}: {workers} worker(s): {runs[-1].rate:,.0f} jobs/s "
                f"in {runs[-1].seconds:.2f} s",
                flush=True,
            )


def merged(runs: Sequence[Run]) -> list[Run]:
    """One run per (variant, workers), in first-seen order: the median rate (as seconds),
    and the latencies of all its runs together."""
    groups: dict[tuple[str, int], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.label, r.workers), []).append(r)
    out = []
    for (label, workers), group in groups.items():
        seconds = statistics.median(r.seconds for r in group)
        latencies = [x for r in group for x in r.latencies]
        cpus = [r.cpu for r in group if r.cpu is not None]
        cpu = statistics.median(cpus) if len(cpus) == len(group) else None
        out.append(Run(label, workers, group[0].jobs, seconds, latencies, cpu))
    return sorted(out, key=lambda r: (r.label == "brainhands hands", r.workers))


def report(all_runs: Sequence[Run], concurrency: int, rounds: int) -> None:
    runs = merged(all_runs)
    one = next((r for r in runs if r.label == "brainhands hands" and r.workers == 1), None)
    rows: list[list[object]] = []
    for r in runs:
        speedup = f"{r.rate / one.rate:.2f}x" if one and r.label == one.label else "-"
        label = r.label + (" (baseline)" if r.label != "brainhands hands" else "")
        rows.append(
            [
                label,
                r.workers,
                f"{r.rate:,.0f}",
                f"{percentile(r.latencies, 50) * 1000:.2f}",
                f"{percentile(r.latencies, 99) * 1000:.2f}",
                speedup,
            ]
        )
    print()
    print_table(
        ["variant", "workers", "jobs/s", "p50 ms", "p99 ms", "speedup vs 1 worker"],
        rows,
        align="<>>>>>",
    )
    print()
    print(
        f"{runs[0].jobs} jobs per run, median of {rounds} run(s); concurrency (prefetch) "
        f"{concurrency} per worker; {os.cpu_count()} CPU core(s); p50/p99 per job: "
        "the workers' fence claim -> outcome recorded (store times), the baseline's receipt -> ack"
    )
    scaling = [r for r in runs if r.label == "brainhands hands"]
    if scaling:
        print()
        print("scaling curve (jobs/s):")
        top = max(r.rate for r in scaling)
        for r in scaling:
            bar = "#" * max(1, round(40 * r.rate / top))
            cpu = f"  (workers' CPU {r.cpu / r.jobs * 1000:.2f} ms/job)" if r.cpu else ""
            print(f"  {r.workers} worker(s) | {bar:<40} | {r.rate:,.0f}{cpu}")


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    _, namespace, db_schema = run_names("hands")
    print(
        f"hands: {args.jobs} no-op jobs per run, workers {args.workers}, concurrency "
        f"{args.concurrency}; namespace {namespace}, PostgreSQL schema {db_schema}",
        flush=True,
    )
    runs: list[Run] = []
    topology = Topology(namespace)
    try:
        store = await open_store(args.database_url, db_schema)
        await store.close()
        broker = await Broker.connect(args.rabbitmq_url, topology, connection_name=namespace)
        try:
            with tempfile.TemporaryDirectory(prefix="brainhands-bench-hands-") as tmp:
                bench = Bench(args, namespace, db_schema, broker, Path(tmp))
                await topology.declare_hands_pool(broker.channel, POOL)
                results = await topology.declare_results(broker.channel, COMPAT)
                await broker.consume(results, bench.collect, prefetch=256)
                await measure(bench, runs)
        finally:
            await broker.close()
        report(runs, args.concurrency, args.rounds)
    finally:
        queues = [topology.hands_queue(p) for p in (POOL, BASELINE_POOL)]
        await clean_namespace(
            args, namespace, [*queues, topology.results_queue(COMPAT)], [db_schema]
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per run")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2, 4], help="worker processes per run"
    )
    parser.add_argument(
        "--concurrency", type=int, default=8, help="each worker's concurrency (prefetch)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of every variant")
    parser.add_argument("--no-baseline", action="store_true", help="skip the bare consumer")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a run may take")
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    args = parser.parse_args(argv)
    if min(args.jobs, args.concurrency, args.rounds, *args.workers) < 1:
        parser.error("--jobs, --concurrency, --rounds and --workers must be positive")
    return args


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main(parse_args()))
