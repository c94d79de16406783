"""What a history of finished sessions costs: round trip, throughput and a sweep, on an empty
store and on one holding N finished sessions.

Two fresh PostgreSQL schemas, both migrated to head: ``empty``, and ``filled`` with N
(``--sessions-history``, a million by default) finished one-call agent sessions written by
bulk SQL (``bench/history_fill.py``: their session rows, entries, terminal tasks, answered
submissions, succeeded operations and sent outbox rows), then ``VACUUM ANALYZE``. On each,
the same workers and code (``bench/roundtrip_sessions.py``, under a namespace of its own):

a. **Round trip.** One Brain and one Hands process; S one-call sessions (``--sessions``) one
   after another, each from its ``model`` entry's commit to its ``tool_result`` entry's. Both
   schemas' workers are up, and the sessions alternate between them one by one, so that a
   change in the machine's load (it may be shared) falls on both alike.
b. **Throughput.** Then on each schema in turn, 2 Brains and 2 Hands: B sessions
   (``--burst``) at once, timed until the last one is answered.
c. **A sweep.** Once the workers have stopped: ``Sweeper.sweep_once()`` of this process,
   built like a Brain's (``brainhands.brain.main``), ``--sweeps`` times after one unmeasured.

With ``--prune``, the filled schema's history expires while a and b run there: this process
erases its sessions as the sweeper does (``brain.retention.expire``, a batch each sweeper
period, each session in a transaction of its own, with a retention that spares the run's
own sessions), and the report says how many it erased and how fast, beside the costs it ran
under; run it again without ``--prune`` for the same costs with no prune.

The rounds (``--rounds``) alternate which schema goes first (empty, filled; filled, empty;
...). Then ``EXPLAIN (ANALYZE, BUFFERS)`` of the sweeper's queries, a Brain's load and claim
of a session and a relay's outbox reads on both schemas (``bench/history_plans.py``) -- on
the filled one again with the indexes of ``--explain-without`` dropped, to show what each
buys -- and the relay's prune of the sent outbox rows of the history's first half.

The target: each cost on the filled store within 20% of the empty store's (a throughput at
least 1/1.2 of it; the sweep by its median). ``--code REF`` runs the workers from a commit
(``git archive``), not the working tree. Every process, queue, Redis key and schema is gone
at the end, even on error.

    .venv/bin/python -m bench.history [--sessions-history N] [--sessions S] [--burst B]
        [--rounds R] [--sweeps K] [--explain-without INDEX ...] [--plans] [--code REF]
        [--prune]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from bench._services import (
    ROOT,
    Workers,
    add_service_urls,
    asyncpg_dsn,
    clean_namespace,
    extracted,
    new_parser,
    open_store,
    run_names,
    stop_on_sigterm,
    worker_env,
)
from bench._stats import machine, percentile, print_table
from bench.history_fill import (
    HISTORY_PREFIX,
    HISTORY_SPAN,
    Prefill,
    TableSize,
    prefill,
    table_sizes,
)
from bench.history_plans import EXPLAIN_RUNS, Plan, explain, explain_without, hot_statements
from bench.roundtrip import start_brain_and_hands
from bench.roundtrip_agents import COMPAT
from bench.roundtrip_sessions import (
    analyze,
    burst_sessions,
    serial_sessions,
    session_ids,
    timelines,
)
from bench.roundtrip_tools import POOL
from brainhands.brain.retention import BATCH as RETENTION_BATCH
from brainhands.brain.retention import Retention, expire
from brainhands.brain.settings import BrainSettings
from brainhands.brain.sweeper import Sweeper
from brainhands.shared.broker import Broker
from brainhands.shared.keys import Keys
from brainhands.shared.lease import LeaseManager, connect_redis
from brainhands.shared.progress import QueueProgress
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.store import Store
from brainhands.shared.topology import Topology

BOUND = 1.2
"""A cost on the filled store may be at most this times the empty store's."""
ms = 1000.0


@dataclass
class Side:
    """One of the two schemas, what runs on it, and what was measured there."""

    name: str
    namespace: str
    schema: str
    young: bool
    """The store is as young as the run: its statistics are taken again each round."""
    serial: list[float] = field(default_factory=list)
    """Round trips (s) of the serial sessions, all rounds together."""
    burst: list[float] = field(default_factory=list)
    """Round trips (s) of the burst's sessions, all rounds together."""
    rates: list[float] = field(default_factory=list)
    """Sessions/s of each round's burst."""
    sweeps: list[float] = field(default_factory=list)
    """Seconds of each measured sweep."""
    cpu: dict[str, list[float]] = field(default_factory=dict)
    """CPU seconds per burst session of each role, per round."""
    plans: list[Plan] = field(default_factory=list)
    plans_without: list[Plan] = field(default_factory=list)
    """The same with the ``--explain-without`` indexes dropped."""
    builds: dict[str, float] = field(default_factory=dict)
    """Seconds each of those indexes took to build again."""
    sizes: list[TableSize] = field(default_factory=list)
    erased: list[tuple[int, float]] = field(default_factory=list)
    """With ``--prune``: sessions erased, and the seconds it took, while each round ran."""

    @property
    def topology(self) -> Topology:
        return Topology(self.namespace)

    @property
    def queues(self) -> list[str]:
        return [self.topology.hands_queue(POOL), *self.topology.brain_queues(COMPAT)]


@dataclass
class Open:
    """A side's connections for the whole run."""

    store: Store
    broker: Broker
    db: asyncpg.Connection
    sweeper: Sweeper
    relay: OutboxRelay


async def open_side(args: argparse.Namespace, side: Side, stack: contextlib.AsyncExitStack) -> Open:
    store = await open_store(args.database_url, side.schema)
    stack.push_async_callback(store.close)
    topology = side.topology
    broker = await Broker.connect(args.rabbitmq_url, topology, connection_name=side.namespace)
    stack.push_async_callback(broker.close)
    await topology.declare_brain(broker.channel, COMPAT)
    db = await asyncpg.connect(
        asyncpg_dsn(args.database_url), server_settings={"search_path": side.schema}
    )
    stack.push_async_callback(db.close)
    redis = connect_redis(args.redis_url)
    stack.push_async_callback(redis.aclose)
    keys = Keys(side.namespace)
    # As a Brain builds it (brain/brainhands/brain/main.py), with BrainSettings' default periods.
    sweeper = Sweeper(
        store=store,
        broker=broker,
        leases=LeaseManager(redis, keys),
        progress=QueueProgress(redis, keys),
    )
    # Submissions' wake-ups are published by a relay here, woken by each commit; it runs
    # only while a round submits, so that nothing else reads the store during the sweeps
    # and the EXPLAINs.
    relay = OutboxRelay(store, broker)
    store.add_commit_listener(relay.wake)
    return Open(store, broker, db, sweeper, relay)


async def measure_round(
    args: argparse.Namespace, sides: Sequence[tuple[Side, Open]], logs: Path, code: Path, n: int
) -> None:
    """Round ``n`` on both sides (``sides``: in the order they go first), workers running
    the tree ``code``. The serial sessions alternate between the sides one by one (each
    side's 1 Brain + 1 Hands idle while the other's runs), so that both see the same load
    on the machine; then each side's burst and its sweeps, one side after the other."""
    await analyze_young(sides)
    stop = asyncio.Event()
    relays = [asyncio.create_task(c.relay.run(stop)) for _, c in sides]
    pruning = [
        asyncio.create_task(expire_history(side, c, stop))
        for side, c in sides
        if args.prune and not side.young
    ]
    try:
        with contextlib.ExitStack() as stack:
            fleets = [
                stack.enter_context(Workers(_env(args, side), logs / f"{side.name}-{n}", code=code))
                for side, _ in sides
            ]
            for workers in fleets:
                start_brain_and_hands(workers)
            for workers in fleets:
                await workers.wait_consuming()
            lanes = list(zip(sides, fleets, strict=True))
            for (side, c), workers in lanes:
                warm = session_ids(f"warm{n}", args.warmup)
                await serial_sessions(c.store, c.db, side.topology, workers, warm, args.timeout)
            serial = session_ids(f"rt{n}", args.sessions)
            for i, session_id in enumerate(serial):
                for (side, c), workers in lanes if i % 2 == 0 else reversed(lanes):
                    await serial_sessions(
                        c.store, c.db, side.topology, workers, [session_id], args.timeout
                    )
            for workers in fleets:
                workers.stop()
            for (side, c), workers in lanes:
                found = await timelines(c.db, serial, workers, side.topology)
                side.serial += [t.latency for t in found]
        for side, c in sides:
            await measure_burst(args, side, c, logs / f"{side.name}-{n}-burst", code)
    finally:
        stop.set()
        await asyncio.gather(*relays, *pruning)
    await analyze_young(sides)
    for side, c in sides:
        await c.sweeper.sweep_once()
        for _ in range(args.sweeps):
            start = time.perf_counter()
            await c.sweeper.sweep_once()
            side.sweeps.append(time.perf_counter() - start)
        print(
            f"  round {n + 1}, {side.name}: round trip p50 "
            f"{percentile(side.serial[-args.sessions :], 50) * ms:.1f} ms, burst "
            f"{side.rates[-1]:,.1f} sessions/s, sweep "
            f"{statistics.median(side.sweeps[-args.sweeps :]) * ms:.2f} ms (median)",
            flush=True,
        )


async def measure_burst(
    args: argparse.Namespace, side: Side, c: Open, logs: Path, code: Path
) -> None:
    """The burst of a round on ``side``: 2 Brains + 2 Hands, ``--burst`` sessions at once."""
    burst = session_ids(f"tp{len(side.rates)}", args.burst)
    with Workers(_env(args, side), logs, code=code) as workers:
        for _ in range(2):
            start_brain_and_hands(workers)
        await workers.wait_consuming()
        cpu = workers.cpu()
        seconds = await burst_sessions(c.store, c.db, side.topology, workers, burst, args.timeout)
        for role, used in workers.cpu().items():
            side.cpu.setdefault(role, []).append((used - cpu.get(role, 0.0)) / len(burst))
        workers.stop()
    side.rates.append(len(burst) / seconds)
    side.burst += [t.latency for t in await timelines(c.db, burst, workers, side.topology)]


async def expire_history(side: Side, c: Open, stop: asyncio.Event) -> None:
    """Erase the history's sessions as the sweeper does, a batch a pass (a pass a
    ``sweeper_period``), until ``stop`` (or none is left): a retention that ends a minute
    before this round began, so the round's own sessions are spared."""
    began = time.time()
    erased = 0
    period = BrainSettings.model_fields["sweeper_period"].default
    while not stop.is_set():
        days = (time.time() - began + 60) / 86400
        done = await expire(c.store, Retention(days))
        erased += done
        if done < RETENTION_BATCH:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), period)
    side.erased.append((erased, time.time() - began))


async def analyze_young(sides: Sequence[tuple[Side, Open]]) -> None:
    """ANALYZE the young store's tables. Within a round they grow from a few rows to
    thousands, faster than autovacuum (a minute's nap) follows; on statistics that still say
    "a few rows" the planner reads the task table's status index with bitmap scans, which
    never mark dead index entries, so each sweep would re-read every dead version of every
    task that changed status until a vacuum. That is the cost of a young store's statistics,
    not of history; the filled store has had its statistics since the prefill."""
    for side, c in sides:
        if side.young:
            await analyze(c.db)


def _env(args: argparse.Namespace, side: Side) -> dict[str, str]:
    return worker_env(args, side.namespace, side.schema, args.concurrency)


async def explain_side(side: Side, c: Open, probe: str, without: Sequence[str]) -> None:
    """The plans of the hot statements on ``side``, with session ``probe`` for the Brain's;
    again with the indexes ``without`` dropped, if any."""
    fence = int(await c.db.fetchval("SELECT fence FROM session WHERE id = $1", probe))
    ids = [probe, *session_ids("rt0", 99)]
    statements = await hot_statements(c.store, probe, ids, fence)
    for statement in statements:
        side.plans.append(await explain(c.db, statement))
    if without:
        side.plans_without, side.builds = await explain_without(c.db, statements, without)


async def prune(c: Open, fill: Prefill) -> tuple[int, int, float]:
    """Prune the outbox's rows sent in the first half of the history, as a relay prunes
    those older than its retention: rows before, rows pruned, seconds."""
    before = int(await c.db.fetchval("SELECT count(*) FROM outbox"))
    start = time.monotonic()
    middle = fill.start + HISTORY_SPAN / 2
    pruned = await c.store.outbox.prune(older_than=time.time() - middle)
    return before, pruned, time.monotonic() - start


@dataclass
class Run:
    empty: Side
    filled: Side
    fill: Prefill | None = None
    pruned: tuple[int, int, float] = (0, 0, 0.0)


async def bench(args: argparse.Namespace, run: Run, logs: Path) -> None:
    async with contextlib.AsyncExitStack() as stack:
        code = ROOT if args.code is None else stack.enter_context(extracted(args.code))
        empty = await open_side(args, run.empty, stack)
        filled = await open_side(args, run.filled, stack)
        print(f"prefill: {args.sessions_history:,} finished sessions into {run.filled.schema}")
        run.fill = await prefill(filled.db, run.filled.topology, args.sessions_history)
        print(f"prefill took {run.fill.total:.1f} s", flush=True)
        run.filled.sizes = await table_sizes(filled.db, run.filled.schema, exact=False)
        sides = [(run.empty, empty), (run.filled, filled)]
        for n in range(args.rounds):
            await measure_round(args, sides if n % 2 == 0 else sides[::-1], logs, code, n)
        run.empty.sizes = await table_sizes(empty.db, run.empty.schema, exact=True)
        print("EXPLAIN (ANALYZE, BUFFERS) of the hot statements", flush=True)
        await explain_side(run.empty, empty, session_ids("rt0", 1)[0], [])
        middle = f"{HISTORY_PREFIX}{max(args.sessions_history // 2, 1):07d}"
        await explain_side(run.filled, filled, middle, args.explain_without)
        print("pruning the first half of the filled outbox's sent rows", flush=True)
        run.pruned = await prune(filled, run.fill)


# Report ----------------------------------------------------------------------------------------


def verdict(ratio: float, higher_is_better: bool = False) -> str:
    ok = ratio >= 1 / BOUND if higher_is_better else ratio <= BOUND
    return "PASS" if ok else "NOT MET"


def report(args: argparse.Namespace, run: Run) -> None:
    e, f = run.empty, run.filled
    assert run.fill is not None
    print()
    print(
        f"prefill of {run.fill.sessions:,} finished sessions: {run.fill.total:.1f} s ("
        + ", ".join(f"{t} {s:.1f} s" for t, s in run.fill.seconds.items())
        + ")"
    )
    print_table(
        ["table", "rows filled", "MB filled", "of which indexes", "rows empty", "MB empty"],
        [
            [
                s.table,
                f"{s.rows:,}",
                f"{s.total / 1e6:,.1f}",
                f"{s.indexes / 1e6:,.1f}",
                f"{empty.rows:,}" if (empty := _size(e.sizes, s.table)) else "-",
                f"{empty.total / 1e6:,.1f}" if empty else "-",
            ]
            for s in f.sizes
            if s.rows or s.total > 100_000
        ],
        align="<>>>>>",
    )
    rows: list[list[object]] = []

    def row(
        metric: str, a: float, b: float, unit: str, judged: str | None, ratio: float | None = None
    ) -> None:
        if ratio is None:
            ratio = b / a if a else float("inf")
        mark = "-" if judged is None else verdict(ratio, judged == "higher")
        rows.append([metric, f"{a:,.2f} {unit}", f"{b:,.2f} {unit}", f"{ratio:.2f}x", mark])

    lower = "lower"
    row("round trip p50 (serial)", _p(e.serial, 50), _p(f.serial, 50), "ms", lower)
    row("round trip p99 (serial)", _p(e.serial, 99), _p(f.serial, 99), "ms", lower)
    # Each round's two bursts ran minutes apart at most: their ratio leaves out a drift of the
    # machine's load over the run, which the medians of the two sides would keep.
    paired = _med([b / a for a, b in zip(e.rates, f.rates, strict=True)])
    row("throughput (burst)", _med(e.rates), _med(f.rates), "sessions/s", "higher", paired)
    row("round trip p50 under the burst", _p(e.burst, 50), _p(f.burst, 50), "ms", None)
    row("one sweep (median)", _med(e.sweeps) * ms, _med(f.sweeps) * ms, "ms", lower)
    row("one sweep (mean)", _mean_ms(e.sweeps), _mean_ms(f.sweeps), "ms", None)
    for role in sorted(e.cpu.keys() & f.cpu.keys()):
        row(f"{role} CPU per burst session", _med(e.cpu[role]) * ms, _med(f.cpu[role]) * ms,
            "ms", None)  # fmt: skip
    print()
    print(
        f"{args.rounds} round(s) per schema; each: {args.sessions} serial sessions (1 Brain + "
        f"1 Hands), {args.burst} at once (2 Brains + 2 Hands), {args.sweeps} sweeps"
    )
    print_table(["metric", "empty", "filled", "filled/empty", f"within {BOUND}x"], rows, "<>>>>")
    print(
        "throughput: the medians of the rounds' bursts, and the median of each round's "
        "filled/empty ratio, which passes at >= 1/1.2 (the cost of a session within 20%); the "
        "sweep is judged by its median, which one sweep slowed by another process on the "
        "machine does not move; the rows marked - are for reading only. The empty schema "
        "holds only the run's own sessions."
    )
    print(
        "bursts, sessions/s by round: empty "
        + ", ".join(f"{r:.1f}" for r in e.rates)
        + "; filled "
        + ", ".join(f"{r:.1f}" for r in f.rates)
    )
    for n, (erased, seconds) in enumerate(f.erased):
        print(
            f"round {n + 1}: the filled schema's history expiring meanwhile: {erased:,} sessions "
            f"erased in {seconds:.1f} s ({erased / seconds:,.0f}/s), each with all it owns"
        )
    report_plans(args, e, f)
    before, pruned, seconds = run.pruned
    print(
        f"prune of the filled outbox's first half (the relay's prune_sent, one DELETE): "
        f"{pruned:,} of {before:,} sent rows in {seconds:.1f} s"
    )


def report_plans(args: argparse.Namespace, e: Side, f: Side) -> None:
    print()
    print(
        f"EXPLAIN (ANALYZE, BUFFERS), fastest of {EXPLAIN_RUNS}; the Brain's statements for the "
        "history's middle session (filled) and the first serial session (empty)"
    )
    empty = {p.label: p for p in e.plans}
    without = {p.label: p for p in f.plans_without}
    dropped = ", ".join(args.explain_without)
    headers = ["statement", "empty ms", "filled ms", "filled buffers hit/read", "seq scans"]
    if without:
        headers += [f"filled ms without {dropped}", "buffers hit/read", "seq scans"]
    rows: list[list[object]] = []
    for p in f.plans:
        q, w = empty.get(p.label), without.get(p.label)
        row: list[object] = [p.label, f"{q.execution_ms:.3f}" if q else "-", *_cells(p)]
        rows.append(row + (_cells(w) if w else []))
    print_table(headers, rows, align="<>>><>><"[: len(headers)])
    for name, seconds in f.builds.items():
        print(f"building {name} again on the filled schema took {seconds:.2f} s")
    if args.plans:
        for p in f.plans:
            if p.label in empty:
                print(f"\n-- {p.label} (empty)\n{empty[p.label].text}")
            print(f"\n-- {p.label} (filled)\n{p.text}")
            if p.label in without:
                print(f"\n-- {p.label} (filled, without {dropped})\n{without[p.label].text}")


def _cells(p: Plan) -> list[object]:
    return [f"{p.execution_ms:.3f}", f"{p.hit}/{p.read}", ", ".join(p.seq_scans) or "-"]


def _size(sizes: Sequence[TableSize], table: str) -> TableSize | None:
    return next((s for s in sizes if s.table == table), None)


def _p(samples: Sequence[float], p: float) -> float:
    return percentile(samples, p) * ms


def _med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _mean_ms(values: Sequence[float]) -> float:
    return statistics.mean(values) * ms if values else 0.0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument(
        "--sessions-history", type=int, default=1_000_000, help="finished sessions prefilled"
    )
    parser.add_argument("--sessions", type=int, default=100, help="serial sessions per round")
    parser.add_argument("--burst", type=int, default=300, help="sessions at once per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per schema")
    parser.add_argument("--sweeps", type=int, default=10, help="measured sweeps per round")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured sessions per round")
    parser.add_argument(
        "--concurrency", type=int, default=0, help="Brain/Hands concurrency (default: their own)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a part may take")
    parser.add_argument("--plans", action="store_true", help="print the plans, not only times")
    parser.add_argument(
        "--explain-without",
        nargs="+",
        default=[],
        metavar="INDEX",
        help="explain the filled schema's statements again with these indexes dropped",
    )
    parser.add_argument(
        "--code", metavar="REF", help="run the workers from this commit (default: the working tree)"
    )
    parser.add_argument("--logs", help="keep the worker processes' logs in this directory")
    parser.add_argument(
        "--prune",
        action="store_true",
        help="erase the filled schema's history, as retention does, while the rounds run there",
    )
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    args = parser.parse_args(argv)
    if min(args.sessions_history, args.sessions, args.burst, args.rounds, args.sweeps) < 1:
        parser.error("counts must be positive")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    return args


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    _, namespace, schema = run_names("history")
    run = Run(
        Side("empty", f"{namespace}e", f"{schema}_empty", young=True),
        Side("filled", f"{namespace}f", f"{schema}_filled", young=False),
    )
    print(
        f"history bench on {machine()}; namespaces {namespace}e/f, schemas {schema}_empty/_filled"
    )
    with tempfile.TemporaryDirectory(prefix="brainhands-bench-history-") as tmp:
        try:
            await bench(args, run, Path(args.logs or tmp))
        finally:
            for side in (run.empty, run.filled):
                await clean_namespace(args, side.namespace, side.queues, [side.schema])
    report(args, run)
    print(f"({machine()})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main(parse_args()))
