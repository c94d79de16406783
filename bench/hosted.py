"""What hosting an agent of another framework costs, beside the same agent on brainhands' own
``Agent``: Brain CPU and store write transactions per session, as a ratio (issue #50).

Every variant is the same agent (``bench/hosted_agents.py``): a scripted model whose first
turn asks for one call of a no-op ``ping`` tool and whose second answers; the native
``Agent``, then one row per hosted framework installed (``VARIANTS``). A session is one
submission: two model turns and one tool call.

One Brain process serves every variant (``--agents`` of each module) and one Hands process
runs every variant's tool (pool ``bench``), so the variants share the processes, their
background work and the machine. The sessions are run in ``--rounds`` rounds: each round
every variant runs its share of ``--sessions`` sessions one after another (or all at once:
``--at-once``), the order rotating from round to round (``bench/_rounds.py``) so that drift
in the machine's speed weighs on all alike. Around each stint the bench reads the Brain's
and the Hands' CPU (``/proc``) and the store's counters (``bench/roundtrip_counts.py``): its
write transactions (transaction ids consumed; read-only ones take none) and its statements,
on a PostgreSQL and a Redis of the run's own (``bench/roundtrip_servers.py``), where no
other client moves them. ``--no-counts`` runs on ``--database-url`` and ``--redis-url`` as
given, and measures the CPU only. What a stint costs includes its submissions (the harness's
own store writes, the same for every variant) and the background polls while it runs.

The target (issue #50): an integration costs at most ``TARGET_RATIO`` x the native agent,
in Brain CPU per session and in store write transactions per session.

    .venv/bin/python -m bench.hosted [--sessions N] [--rounds R] [--at-once] [--no-counts]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from bench._rounds import rotated, shares
from bench._services import (
    Workers,
    add_service_urls,
    asyncpg_dsn,
    clean_namespace,
    new_parser,
    open_store,
    run_names,
    stop_on_sigterm,
    worker_env,
)
from bench._stats import machine, print_table
from bench.hosted_agents import VARIANTS, Variant
from bench.roundtrip_agents import COMPAT
from bench.roundtrip_costs import new_meter
from bench.roundtrip_counts import TAIL, Counts, Meter, amqp_counting, part_end, take
from bench.roundtrip_servers import own_servers, system_settings
from bench.roundtrip_sessions import (
    analyze,
    burst_sessions,
    cpu_per_session,
    serial_sessions,
    session_ids,
)
from bench.roundtrip_tools import POOL
from brainhands.shared.broker import Broker
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.store import Store
from brainhands.shared.topology import Topology

TARGET_RATIO = 1.3
"""An integration's Brain CPU and store write transactions per session, at most this times
the native agent's."""
ms = 1000.0


@dataclass
class Cost:
    """What one variant's stints took, summed over the rounds."""

    variant: Variant
    sessions: int = 0
    brain: float = 0.0
    """Brain CPU seconds."""
    hands: float = 0.0
    counts: Counts | None = None
    per_round: list[float] = field(default_factory=list)
    """Brain CPU seconds per session in each round."""

    def add(self, n: int, cpu: dict[str, float], counts: Counts | None) -> None:
        """A stint of ``n`` sessions: CPU seconds per session by role, and its counts."""
        self.sessions += n
        self.brain += cpu.get("brain", 0.0) * n
        self.hands += cpu.get("hands", 0.0) * n
        self.per_round.append(cpu.get("brain", 0.0))
        if counts is not None:
            self.counts = counts if self.counts is None else self.counts.plus(counts)

    @property
    def brain_per_session(self) -> float:
        return self.brain / self.sessions

    @property
    def xids_per_session(self) -> float | None:
        return self.counts.xids / self.sessions if self.counts else None


@dataclass
class Stage:
    """The services and processes of a run."""

    store: Store
    db: asyncpg.Connection
    topology: Topology
    workers: Workers
    meter: Meter | None


async def stint(
    stage: Stage, variant: Variant, ids: Sequence[str], args: argparse.Namespace
) -> tuple[dict[str, float], Counts | None]:
    """Run the sessions ``ids`` of ``variant``; what the processes took meanwhile (CPU
    seconds per session, by role) and what the store counted."""
    run = burst_sessions if args.at_once else serial_sessions
    w = stage.workers
    cpu, counts = w.cpu(), await take(stage.meter, w)
    await run(stage.store, stage.db, stage.topology, w, ids, args.timeout, variant.agent)
    await asyncio.sleep(TAIL)
    used = cpu_per_session(cpu, w.cpu(), len(ids))
    return used, await part_end(stage.meter, w, counts)


async def measure(args: argparse.Namespace, variants: Sequence[Variant], logs: Path) -> list[Cost]:
    """Every variant's sessions, in rounds, in a namespace and schema of the run's own."""
    _, namespace, schema = run_names("hosted")
    print(f"namespace {namespace}, PostgreSQL schema {schema}", flush=True)
    topology = Topology(namespace)
    try:
        async with contextlib.AsyncExitStack() as stack:
            store = await open_store(args.database_url, schema)
            stack.push_async_callback(store.close)
            broker = await Broker.connect(args.rabbitmq_url, topology, connection_name=namespace)
            stack.push_async_callback(broker.close)
            # The harness's polls (answered yet?) run as the observer, whose work is not counted.
            observer = args.servers.observer_url if args.servers else args.database_url
            db = await asyncpg.connect(
                asyncpg_dsn(observer), server_settings={"search_path": schema}
            )
            stack.push_async_callback(db.close)
            meter = await stack.enter_async_context(new_meter(args)) if args.servers else None
            if meter is not None:
                meter.excluded.add(await db.fetchval("SELECT pg_backend_pid()"))
            env = worker_env(args, namespace, schema)
            module = "bench.roundtrip_counted" if args.servers else "brainhands"
            workers = stack.enter_context(Workers(env, logs, module=module))
            # Submissions' wake-ups are published by a relay here, woken by each commit.
            relay = OutboxRelay(store, broker)
            store.add_commit_listener(relay.wake)
            relay_stop = asyncio.Event()
            relay_task = asyncio.create_task(relay.run(relay_stop))
            stack.push_async_callback(lambda: relay_task)
            stack.callback(relay_stop.set)
            agents = [a for v in variants for a in ("--agents", v.module)]
            tools = [t for m in dict.fromkeys(v.tools for v in variants) for t in ("--tools", m)]
            workers.start("brain", "--compat", COMPAT, *agents)
            workers.start("hands", "--pool", POOL, *tools)
            await workers.wait_consuming()
            stage = Stage(store, db, topology, workers, meter)
            for v in variants:
                warm = session_ids(f"warm-{v.agent}", args.warmup)
                await serial_sessions(store, db, topology, workers, warm, args.timeout, v.agent)
            await analyze(db)
            costs = {v.agent: Cost(v) for v in variants}
            for r, share in enumerate(shares(args.sessions, args.rounds)):
                print(f"round {r + 1} of {args.rounds}: {share} sessions each", flush=True)
                for v in rotated(variants, r):
                    ids = session_ids(f"{v.agent}-{r}", share)
                    cpu, counts = await stint(stage, v, ids, args)
                    costs[v.agent].add(share, cpu, counts)
            return list(costs.values())
    finally:
        queues = [topology.hands_queue(POOL), *topology.brain_queues(COMPAT)]
        await clean_namespace(args, namespace, queues, [schema])


# Report -------------------------------------------------------------------------------------


def ratio(value: float | None, native: float | None) -> str:
    return f"{value / native:.2f}x" if value is not None and native else "-"


def report(args: argparse.Namespace, costs: Sequence[Cost]) -> None:
    native = costs[0]
    how = "all at once" if args.at_once else "one after another"
    print()
    print(
        f"per session (2 model turns, 1 tool call; {native.sessions} sessions of each agent, "
        f"{how}, in {args.rounds} rounds):"
    )
    rows: list[list[object]] = []
    for c in costs:
        xids, statements = c.xids_per_session, None
        if c.counts is not None:
            statements = c.counts.statements / c.sessions
        rounds = ", ".join(f"{s * ms:.1f}" for s in c.per_round)
        rows.append(
            [
                c.variant.label,
                f"{c.brain_per_session * ms:.2f}",
                ratio(c.brain_per_session, native.brain_per_session),
                f"{xids:.2f}" if xids is not None else "-",
                ratio(xids, native.xids_per_session),
                f"{statements:.1f}" if statements is not None else "-",
                f"{c.hands / c.sessions * ms:.2f}",
                rounds,
            ]
        )
    print_table(
        [
            "agent",
            "Brain CPU ms",
            "vs native",
            "store write txns",
            "vs native",
            "store statements",
            "Hands CPU ms",
            "Brain CPU ms by round",
        ],
        rows,
        align="<>>>>>><",
    )
    print(
        "Brain CPU per model turn is half the session's. Write transactions: transaction ids "
        "consumed (read-only ones take none), the harness's submissions included."
    )
    for c in costs[1:]:
        cpu = c.brain_per_session / native.brain_per_session
        verdicts = [f"Brain CPU {cpu:.2f}x"]
        met = cpu <= TARGET_RATIO
        if c.xids_per_session is not None and native.xids_per_session:
            xids = c.xids_per_session / native.xids_per_session
            verdicts.append(f"write transactions {xids:.2f}x")
            met = met and xids <= TARGET_RATIO
        print(
            f"target {c.variant.label} <= {TARGET_RATIO}x the native agent: "
            f"{', '.join(verdicts)}: {'MET' if met else 'NOT MET'}"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument(
        "--sessions", type=int, default=90, help="sessions of each agent, over all rounds"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds the sessions are split into")
    parser.add_argument(
        "--at-once",
        action="store_true",
        help="submit each stint's sessions all at once (default: one after another)",
    )
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured sessions of each agent")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a stint may take")
    parser.add_argument("--logs", help="keep the worker processes' logs in this directory")
    parser.add_argument(
        "--no-counts",
        action="store_true",
        help="run on --database-url and --redis-url as given, measuring CPU only (the "
        "store's counts need servers of the run's own)",
    )
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.sessions < args.rounds or args.warmup < 0:
        parser.error("--rounds must be positive, --sessions at least --rounds, --warmup >= 0")
    return args


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    print(f"hosted bench on {machine()}", flush=True)
    variants = [v for v in VARIANTS if v.installed()]
    for v in VARIANTS:
        if v not in variants:
            print(f"{v.label}: {v.requires} is not installed, left out", flush=True)
    args.servers = None
    with (
        tempfile.TemporaryDirectory(prefix="brainhands-bench-hosted-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        if not args.no_counts:
            settings = await system_settings(args.database_url)
            servers = stack.enter_context(own_servers(settings))
            args.servers = servers
            args.database_url, args.redis_url = servers.database_url, servers.redis_url
            amqp_counting()
            print(f"own servers: PostgreSQL :{servers.pg_port}, Redis :{servers.redis_port}")
        costs = await measure(args, variants, Path(args.logs or tmp))
    report(args, costs)
    print(f"({machine()})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main(parse_args()))
