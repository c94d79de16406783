"""Outbox relay throughput: rows/s published *and confirmed*, next to raw aio-pika.

Every variant moves the same N messages (an encoded ``ToolJob`` each, persistent, mandatory)
to the same quorum queue, and runs in processes of its own that connect first and start
only when told, so connecting is not timed:

* ``raw aio-pika``: one process publishes the N messages with publisher confirms, in batches
  of 100 whose confirms are awaited together before the next batch (the denominator);
* ``Broker.publish_many``: the same through ``shared.broker`` (no store), for information:
  it separates the broker wrapper's cost from the store's;
* ``relay x1``: one ``OutboxRelay`` (its own Store engine and Broker connection) drains N
  rows pre-filled in the PostgreSQL outbox, until every row is marked sent;
* ``relay x2``: two relays in two processes drain the same N rows (``SKIP LOCKED``).

The outbox is emptied and pre-filled (with ``Draft.add_outbox`` commits, untimed) before
each relay run, and the queue purged after every run. The variants take turns in rounds so
machine noise hits them alike; the table shows the median run. The target is that one
relay reaches at least 70% of raw confirmed-publish throughput. Each variant's processes
also report the CPU they spent, shown per message under the table.

    .venv/bin/python -m bench.relay [--rows N] [--rounds R] [--batch B]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aio_pika
from sqlalchemy import text

from bench._rounds import rotated
from bench._services import (
    ROOT,
    add_service_urls,
    clean_namespace,
    new_parser,
    open_store,
    run_names,
    stop_on_sigterm,
)
from bench._stats import print_table
from bench.noop_tools import POOL, noop_job
from brainhands.shared.broker import Broker, Outgoing
from brainhands.shared.config import normalize_database_url
from brainhands.shared.messages import encode
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.store import Draft, Store
from brainhands.shared.topology import Topology

TARGET_RATIO = 0.70
PREFILL_BATCH = 500
RAW = "raw aio-pika"
PUBLISH_MANY = "Broker.publish_many"


def body(i: int) -> bytes:
    """The i-th message: a tool job, as a Brain's outbox row carries it."""
    return encode(noop_job(f"op-{i:08d}"))


# --- children: one process per publisher, driven through stdin/stdout -----------------------


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def next_command() -> str:
    """The next line the parent sends ('' at EOF)."""
    line: str = await asyncio.to_thread(sys.stdin.readline)
    return line.strip()


async def ready() -> bool:
    """Tell the parent this child is ready; whether it then says "go"."""
    say("ready")
    return await next_command() == "go"


class ReportingRelay(OutboxRelay):
    """The relay, telling the parent how many rows each pass confirmed and marked sent."""

    async def drain_once(self) -> int:
        sent = await super().drain_once()
        if sent:
            say(f"sent {sent}")
        return sent


async def child_raw(args: argparse.Namespace) -> None:
    connection = await aio_pika.connect(args.rabbitmq_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        exchange = await channel.get_exchange(args.namespace)
        bodies = [body(i) for i in range(args.rows)]
        if not await ready():
            return
        cpu = time.process_time()
        for start in range(0, len(bodies), args.batch):
            await asyncio.gather(
                *(
                    exchange.publish(
                        aio_pika.Message(
                            b,
                            content_type="application/json",
                            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        ),
                        routing_key=args.queue,
                        mandatory=True,
                    )
                    for b in bodies[start : start + args.batch]
                )
            )
        say(f"done {time.process_time() - cpu:.4f}")


async def child_publish_many(args: argparse.Namespace) -> None:
    broker = await Broker.connect(
        args.rabbitmq_url, Topology(args.namespace), connection_name="bench-publish-many"
    )
    try:
        bodies = [body(i) for i in range(args.rows)]
        if not await ready():
            return
        cpu = time.process_time()
        for start in range(0, len(bodies), args.batch):
            outcomes = await broker.publish_many(
                [Outgoing(b, args.queue) for b in bodies[start : start + args.batch]]
            )
            if any(outcomes):
                raise RuntimeError(f"publish failed: {next(o for o in outcomes if o)}")
        say(f"done {time.process_time() - cpu:.4f}")
    finally:
        await broker.close()


async def child_relay(args: argparse.Namespace) -> None:
    store = await Store.open(args.database_url, db_schema=args.db_schema)
    try:
        broker = await Broker.connect(
            args.rabbitmq_url, Topology(args.namespace), connection_name="bench-relay"
        )
        try:
            # Open the pool's connection and warm the statement caches, as a relay that has
            # been running would have them, inside a transaction that changes nothing.
            async with store.outbox.claim(args.batch) as claimed:
                await claimed.mark_sent(list(range(-args.batch, 0)))
            relay = ReportingRelay(store, broker, batch_size=args.batch)
            if not await ready():
                return
            cpu = time.process_time()
            stop = asyncio.Event()
            running = asyncio.create_task(relay.run(stop))
            await next_command()  # "stop", or EOF
            stop.set()
            await running
            say(f"published {relay.published} {time.process_time() - cpu:.4f}")
        finally:
            await broker.close()
    finally:
        await store.close()


CHILDREN = {"raw": child_raw, "publish_many": child_publish_many, "relay": child_relay}


# --- the parent --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    label: str
    kind: str
    processes: int
    info: bool = False


VARIANTS = (
    Variant(RAW, "raw", 1),
    Variant(PUBLISH_MANY, "publish_many", 1, info=True),
    Variant("relay x1", "relay", 1),
    Variant("relay x2", "relay", 2),
)


@dataclass
class Setup:
    args: argparse.Namespace
    namespace: str
    db_schema: str
    database_url: str
    store: Store
    admin: aio_pika.abc.AbstractChannel
    """A plain channel: a robust one answers passive declares from its cache."""
    queue: str
    session_id: str
    version: int
    fence: int
    seconds: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    """CPU seconds the variant's processes spent from "go" to the end, summed."""


class Child:
    """A publisher process of this module, speaking one line at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def spawn(cls, setup: Setup, kind: str) -> Child:
        a = setup.args
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.relay",
            "--child",
            kind,
            "--namespace",
            setup.namespace,
            "--db-schema",
            setup.db_schema,
            "--database-url",
            setup.database_url,
            "--rabbitmq-url",
            a.rabbitmq_url,
            "--queue",
            setup.queue,
            "--rows",
            str(a.rows),
            "--batch",
            str(a.batch),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def line(self) -> str:
        assert self.proc.stdout is not None
        return (await self.proc.stdout.readline()).decode().strip()

    async def expect(self, word: str) -> str:
        got = await self.line()
        if not got.startswith(word):
            await self.proc.wait()
            raise RuntimeError(
                f"child {self.proc.pid} said {got!r} instead of {word!r} "
                f"(exit code {self.proc.returncode}; see its stderr above)"
            )
        return got

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")

    async def finish(self) -> None:
        """Let it exit; kill it if it does not within a few seconds."""
        if self.proc.returncode is None:
            with contextlib.suppress(ConnectionError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def prefill(setup: Setup, rows: int) -> None:
    """Empty the outbox, then commit ``rows`` rows into it in batches (untimed)."""
    async with setup.store.backend.transaction() as conn:
        await conn.execute(text("TRUNCATE outbox"))
    for start in range(0, rows, PREFILL_BATCH):
        draft = Draft(setup.session_id, version=setup.version, fence=setup.fence)
        for i in range(start, min(start + PREFILL_BATCH, rows)):
            draft.add_outbox(setup.queue, body(i))
        receipt = await setup.store.commit(draft)
        setup.version = receipt.version
    async with setup.store.backend.transaction() as conn:
        await conn.execute(text("ANALYZE outbox"))


async def run_variant(setup: Setup, variant: Variant) -> tuple[float, float]:
    """One run of ``variant``: seconds from "go" until all N messages are confirmed, and
    the CPU seconds its processes spent."""
    rows = setup.args.rows
    if variant.kind == "relay":
        await prefill(setup, rows)
    children: list[Child] = []
    try:
        for _ in range(variant.processes):
            children.append(await Child.spawn(setup, variant.kind))
        for child in children:
            await child.expect("ready")
        started = time.perf_counter()
        for child in children:
            child.send("go")
        if variant.kind == "relay":
            elapsed = await drained(children, rows, started)
            status = await setup.store.status()
            if status["outbox_unsent"] != 0:
                raise RuntimeError(f"{status['outbox_unsent']} outbox rows still unsent")
            published = 0
            cpu = 0.0
            for child in children:
                child.send("stop")
                _, count, used = (await child.expect("published")).split()
                published += int(count)
                cpu += float(used)
            if published != rows:
                raise RuntimeError(f"the relays published {published} rows, not {rows}")
        else:
            cpu = float((await children[0].expect("done")).split()[1])
            elapsed = time.perf_counter() - started
    finally:
        for child in children:
            await child.finish()
    queued = await message_count(setup)
    if queued != rows:
        raise RuntimeError(f"{variant.label}: the queue holds {queued} messages, not {rows}")
    queue = await setup.admin.declare_queue(setup.queue, passive=True)
    await queue.purge()
    return elapsed, cpu


async def drained(children: Sequence[Child], rows: int, started: float) -> float:
    """Read the relays' reports until they marked ``rows`` rows sent; the seconds it took."""
    total = 0
    done = asyncio.Event()
    finished_at = 0.0

    async def read(child: Child) -> None:
        nonlocal total, finished_at
        while not done.is_set():
            line = await child.line()
            if not line.startswith("sent "):
                raise RuntimeError(f"relay {child.proc.pid} said {line!r} while draining")
            total += int(line.split()[1])
            if total >= rows:
                finished_at = time.perf_counter()
                done.set()

    readers = [asyncio.create_task(read(child)) for child in children]
    waiter = asyncio.create_task(done.wait())
    try:
        await asyncio.wait([waiter, *readers], return_when=asyncio.FIRST_COMPLETED, timeout=600)
        for reader in readers:
            if reader.done() and reader.exception() is not None:
                raise reader.exception()  # type: ignore[misc]
        if not done.is_set():
            raise RuntimeError(f"the relays marked {total} of {rows} rows sent in time")
    finally:
        for task in [waiter, *readers]:
            task.cancel()
        await asyncio.gather(waiter, *readers, return_exceptions=True)
    return finished_at - started


async def message_count(setup: Setup) -> int:
    queue = await setup.admin.declare_queue(setup.queue, passive=True)
    return int(queue.declaration_result.message_count or 0)


async def measure(setup: Setup) -> None:
    variants = [v for v in VARIANTS if v.kind in setup.args.variants]
    for r in range(setup.args.rounds):
        for variant in rotated(variants, r):
            seconds, cpu = await run_variant(setup, variant)
            setup.seconds.setdefault(variant.label, []).append(seconds)
            setup.cpu.setdefault(variant.label, []).append(cpu)
            rate = setup.args.rows / seconds
            print(
                f"  round {r + 1}: {variant.label:<20} {seconds:7.3f} s  {rate:9,.0f} rows/s  "
                f"CPU {cpu:6.3f} s",
                flush=True,
            )


def report(setup: Setup) -> None:
    rows = setup.args.rows
    medians = {label: statistics.median(s) for label, s in setup.seconds.items()}
    raw_rate = rows / medians[RAW] if RAW in medians else None
    table: list[list[object]] = []
    for variant in VARIANTS:
        if variant.label not in medians:
            continue
        rate = rows / medians[variant.label]
        label = variant.label + (" (denominator)" if variant.label == RAW else "")
        label += " (info)" if variant.info else ""
        ratio = f"{rate / raw_rate:.2f}" if raw_rate else "-"
        table.append([label, rows, f"{medians[variant.label]:.3f}", f"{rate:,.0f}", ratio])
    print()
    print_table(["variant", "rows", "seconds", "rows/s", "ratio vs raw"], table, align="<>>>>")
    print()
    runs = len(next(iter(setup.seconds.values())))
    print(f"median of {runs} run(s) per variant; batches of {setup.args.batch}")
    cpu = ", ".join(
        f"{label} {statistics.median(used) / rows * 1e6:,.0f} µs"
        for label, used in setup.cpu.items()
    )
    print(f"publisher CPU per message (median, all its processes): {cpu}")
    if raw_rate and "relay x1" in medians:
        ratio = rows / medians["relay x1"] / raw_rate
        met = "MET" if ratio >= TARGET_RATIO else "NOT MET"
        print(
            f"one relay reaches {ratio:.0%} of raw confirmed-publish throughput "
            f"(target >= {TARGET_RATIO:.0%}): {met}"
        )


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    tag, namespace, db_schema = run_names("relay")
    database_url = normalize_database_url(args.database_url)
    topology = Topology(namespace)
    print(
        f"relay: {args.rows} rows per run, {args.rounds} round(s); namespace {namespace}, "
        f"PostgreSQL schema {db_schema}",
        flush=True,
    )
    try:
        store = await open_store(database_url, db_schema)
        try:
            connection = await aio_pika.connect(args.rabbitmq_url)
            async with connection:
                admin = await connection.channel()
                await topology.declare_base(admin)
                queue = await topology.declare_hands_pool(admin, POOL)
                session_id = f"bench-{tag}"
                await store.create_session(session_id, compat="bench")
                fence = await store.claim_session_fence(session_id, 1)
                setup = Setup(
                    args=args,
                    namespace=namespace,
                    db_schema=db_schema,
                    database_url=database_url,
                    store=store,
                    admin=admin,
                    queue=queue,
                    session_id=session_id,
                    version=0,
                    fence=fence,
                )
                await measure(setup)
        finally:
            await store.close()
        report(setup)
    finally:
        await clean_namespace(args, namespace, [topology.hands_queue(POOL)], [db_schema])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--rows", type=int, default=10_000, help="messages per run")
    parser.add_argument("--rounds", type=int, default=5, help="runs of every variant")
    parser.add_argument("--batch", type=int, default=100, help="relay batch / raw confirm batch")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=sorted(CHILDREN),
        default=sorted(CHILDREN),
        help="which kinds of variant to run",
    )
    add_service_urls(parser, "postgres", "rabbitmq")
    # Internal: run as one publisher process of the parent.
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--db-schema", help=argparse.SUPPRESS)
    parser.add_argument("--queue", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rows < 1 or args.rounds < 1 or args.batch < 1:
        parser.error("--rows, --rounds and --batch must be positive")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        if arguments.child:
            asyncio.run(CHILDREN[arguments.child](arguments))
        else:
            asyncio.run(main(arguments))
