"""The notify deployment soaked through each infrastructure fault, judged at the email
service's own ledger: one table of what each fault cost.

Per fault, a deployment of its own (``tests/helpers/cluster.py``: the notify example's Brains,
Hands and email service; a fresh PostgreSQL schema or, where the fault needs them, a store,
Redis or broker of its own on loopback) runs B batches at once (``--batches``), five emails
each, their tools cycling through the three policies (``send_query``, ``send_safe``,
``send_unsafe``); every call is slow (``--delay``) and the first ``--drops`` sends' receipts
are lost on the way back (the session sleeps, then asks the service), so calls are in flight,
sleeping and waiting when the fault strikes. Once ``--in-flight`` calls have started the fault is
injected, and healed; then the run waits for every session to finish (``--timeout``).

The table, one row per fault: what was injected; sessions; **lost** (sessions not finished,
emails neither sent nor failed); **duplicate** (emails sent more than once: safe or query
tools; an unsafe one sent twice); **uncertain** (unsafe calls left ``uncertain``, the honest
answer for an effect that may have happened); calls **failed** (by the fault alone: the
workload fails none without one); and the **recovery** time p50/p99 after the heal: from
the heal to the finish of each session still open at that moment.

Faults (``--faults``, all by default): ``worker-kills`` (a Brain and a Hands SIGKILLed, then
restarted: the baseline), ``store-failover`` (the PostgreSQL primary killed, its synchronous
standby promoted: ``tests/helpers/pg_pair.py``), ``redis-failover`` (the Redis primary killed,
Sentinel promotes the replica: ``tests/helpers/redis_sentinel.py``), ``redis-restart`` (a
Redis of the run's own killed and started again empty), ``broker-node`` (one node of a
three-node RabbitMQ cluster SIGKILLed and restarted: ``tests/helpers/rabbit_cluster.py``),
``hands-partition`` (a Hands in a network namespace of its own cut from every service for 3x
its lease TTL while the other works on: ``tests/helpers/netns.py``), ``slow-link`` (that Hands
behind 100 +/- 50 ms and 3% packet loss for 15 s), ``churn-storm`` (three minutes of a
worker SIGKILLed every 0.3-1 s and started again, the deployment's Redis state dropped twice,
over two ``query`` tools, one working three lease TTLs: ``tests/helpers/storm.py``; no call
may fail by churn alone). The namespaces need root (``ip netns``) and, for the loss, ``nft``.

``limits`` is a soak of its own, with a table of its own (``bench._limits``): ``--limit-calls``
calls to a tool limited to 20 a second and a tenth as many to one limited to 3 at once, run
by three Hands while one is SIGKILLed every few seconds, judged at the tools' ledgers.

    .venv/bin/python -m bench.faults [--faults NAME ...] [--batches B] [--in-flight N]
        [--delay S] [--drops D] [--timeout S] [--limit-calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench._limits import report_limits, soak_limits
from bench._services import add_service_urls, drop_schemas, new_parser, run_names, stop_on_sigterm
from bench._stats import machine, percentile, print_table
from brainhands.shared.config import normalize_database_url
from tests.helpers.cluster import Cluster, deployment
from tests.helpers.netns import Link
from tests.helpers.pg_pair import PostgresPair, free_port, postgres_pair
from tests.helpers.polling import eventually, once_it_answers
from tests.helpers.rabbit_cluster import RabbitCluster, rabbit_cluster
from tests.helpers.redis_sentinel import SentinelGroup, sentinel_group, wait_for_ping
from tests.helpers.stores import StoreTarget
from tests.helpers.storm import kill_storm

TOOLS = ("send_query", "send_safe", "send_unsafe")
"""The tools the batches cycle through: one per policy."""
UNSAFE = "send_unsafe"
STORM_TOOLS = ("send_email_after_work", "send_email")
"""The churn storm's tools: both ``query``, one working three lease TTLs before its send
(``tests/helpers/tools.py``), the other the notify example's own send."""


@dataclass
class Services:
    """What one fault's deployment runs on, and what the fault acts on."""

    target: StoreTarget
    redis_url: str
    rabbitmq_url: str
    """The broker as the harness reaches it (the workers may be given more: ``env``)."""
    env: dict[str, str] = field(default_factory=dict)
    pair: PostgresPair | None = None
    sentinels: SentinelGroup | None = None
    redis: subprocess.Popen[bytes] | None = None
    redis_port: int = 0
    rabbits: RabbitCluster | None = None
    link: Link | None = None
    """The network namespace the first Hands runs in, for the faults that cut or slow it."""


ServicesFor = Callable[[argparse.Namespace, str], contextlib.AbstractAsyncContextManager[Services]]
Injection = Callable[[Cluster, Services], Awaitable[str]]
"""Breaks something, heals it, and says what it did; returns once the heal is done."""


@dataclass(frozen=True)
class Fault:
    services: ServicesFor
    inject: Injection
    link_ttl_ms: int = 0
    """Not 0: the first Hands runs behind a link of its own (``Cluster.link``), with this
    lease TTL."""
    tools: tuple[str, ...] = TOOLS
    """The tools the batches cycle through."""


@dataclass
class Row:
    fault: str
    injected: str
    sessions: int
    lost: int
    duplicate: int
    uncertain: int
    failed: int
    recovery: list[float]
    seconds: float


# The services each fault runs on -----------------------------------------------------------


@contextlib.asynccontextmanager
async def system_services(args: argparse.Namespace, schema: str) -> AsyncIterator[Services]:
    """The machine's PostgreSQL (a schema of the run's own) and Redis."""
    try:
        target = StoreTarget(normalize_database_url(args.database_url), schema)
        yield Services(target, args.redis_url, args.rabbitmq_url)
    finally:
        await drop_schemas(args.database_url, schema)


@contextlib.asynccontextmanager
async def failover_store(args: argparse.Namespace, schema: str) -> AsyncIterator[Services]:
    """A PostgreSQL primary and its synchronous standby, named by one multi-host URL."""
    with postgres_pair() as pair:
        target = StoreTarget(normalize_database_url(pair.url), None)
        yield Services(target, args.redis_url, args.rabbitmq_url, pair=pair)


@contextlib.asynccontextmanager
async def sentinel_redis(args: argparse.Namespace, schema: str) -> AsyncIterator[Services]:
    """A Redis primary, a replica and three Sentinels; the machine's PostgreSQL."""
    with sentinel_group() as group:
        async with system_services(args, schema) as services:
            services.redis_url = "redis:///0"
            services.env = {
                "BRAINHANDS_REDIS_SENTINELS": group.sentinels,
                "BRAINHANDS_REDIS_SENTINEL_MASTER": "brainhands",
            }
            services.sentinels = group
            yield services


@contextlib.asynccontextmanager
async def own_redis(args: argparse.Namespace, schema: str) -> AsyncIterator[Services]:
    """A Redis of the run's own, keeping nothing on disk, to kill and start again empty."""
    port = free_port()
    async with system_services(args, schema) as services:
        services.redis_port = port
        services.redis_url = f"redis://127.0.0.1:{port}/0"
        services.redis = start_redis(port)
        try:
            yield services
        finally:
            services.redis.kill()
            services.redis.wait()


@contextlib.asynccontextmanager
async def broker_cluster(args: argparse.Namespace, schema: str) -> AsyncIterator[Services]:
    """Three RabbitMQ nodes in one cluster: the workers are given all three, the harness the
    last (the fault strikes the first)."""
    with rabbit_cluster() as rabbits:
        async with system_services(args, schema) as services:
            services.rabbitmq_url = rabbits.nodes[-1].url
            services.env = {"BRAINHANDS_RABBITMQ_URL": rabbits.url}
            services.rabbits = rabbits
            yield services


def start_redis(port: int) -> subprocess.Popen[bytes]:
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    proc = subprocess.Popen([*argv, "--appendonly", "no"], stdout=subprocess.DEVNULL)
    wait_for_ping(port)
    return proc


# The faults ----------------------------------------------------------------------------------


async def kill_workers(cluster: Cluster, services: Services) -> str:
    for name in ("brain-0", "hands-0"):
        cluster.kill(name)
    await asyncio.sleep(1)
    for name in ("brain-0", "hands-0"):
        cluster.start(name)
    return "SIGKILL of a Brain and a Hands, restarted 1 s later"


async def fail_the_store_over(cluster: Cluster, services: Services) -> str:
    assert services.pair is not None
    await asyncio.to_thread(services.pair.kill_primary)
    await asyncio.sleep(1)
    await asyncio.to_thread(services.pair.promote_standby)
    return "PostgreSQL primary SIGKILLed, synchronous standby promoted 1 s later"


async def fail_redis_over(cluster: Cluster, services: Services) -> str:
    group = services.sentinels
    assert group is not None
    await asyncio.to_thread(group.kill_primary)
    await asyncio.to_thread(group.wait_for_primary, group.replica_port)
    return "Redis primary SIGKILLed, Sentinel promoted the replica"


async def restart_redis_empty(cluster: Cluster, services: Services) -> str:
    assert services.redis is not None
    services.redis.send_signal(signal.SIGKILL)
    services.redis.wait()
    await asyncio.sleep(2)
    services.redis = await asyncio.to_thread(start_redis, services.redis_port)
    return "Redis SIGKILLed, started again empty 2 s later"


async def lose_a_broker_node(cluster: Cluster, services: Services) -> str:
    rabbits = services.rabbits
    assert rabbits is not None
    first = rabbits.nodes[0].name
    await asyncio.to_thread(rabbits.kill, first)
    await asyncio.sleep(3)
    await asyncio.to_thread(rabbits.revive)
    return f"RabbitMQ node {first} (the workers' first address) SIGKILLed, restarted 3 s later"


STORM_SECONDS = 180.0
STORM_WORKERS = ("brain-0", "brain-1", "hands-0", "hands-1", "hands-2", "sweeper-0")


async def blow_a_churn_storm(cluster: Cluster, services: Services) -> str:
    for name in ("hands-2", "sweeper-0"):
        cluster.start(name, **services.env)
    await kill_storm(
        cluster,
        STORM_WORKERS,
        seconds=STORM_SECONDS,
        rng=random.Random(49),
        redis_wipes_at=(STORM_SECONDS / 3, 2 * STORM_SECONDS / 3),
    )
    kills = sum(n for what, n in cluster.kills.items() if what.startswith("SIGKILL"))
    return (
        f"{kills} workers SIGKILLed over {STORM_SECONDS:.0f} s (one every 0.3-1 s, each "
        "started again 0.5-2 s later) and the deployment's Redis state dropped twice"
    )


PARTITION_TTL_MS = 1500
SLOW_LINK_TTL_MS = 5000
"""A lease renewed every third of 1.5 s has a 1 s margin, which one lost SYN (retransmitted
after 1 s) uses up on a lossy link; 5 s leaves more than 3 s."""
SLOW_SECONDS = 15


async def partition_a_hands(cluster: Cluster, services: Services) -> str:
    link = services.link
    assert link is not None
    link.cut_services()
    await asyncio.sleep(3 * PARTITION_TTL_MS / 1000)
    link.heal_services()
    return "a Hands cut from the store, RabbitMQ, Redis and the email service for 3x its lease TTL"


async def slow_a_hands_link(cluster: Cluster, services: Services) -> str:
    link = services.link
    assert link is not None
    link.shape(delay=0.1, jitter=0.05, loss=0.03)
    await asyncio.sleep(SLOW_SECONDS)
    dropped = link.dropped()
    link.shape()
    return f"a Hands behind 100 +/- 50 ms and 3% loss for {SLOW_SECONDS} s ({dropped} dropped)"


FAULTS: dict[str, Fault] = {
    "worker-kills": Fault(system_services, kill_workers),
    "store-failover": Fault(failover_store, fail_the_store_over),
    "redis-failover": Fault(sentinel_redis, fail_redis_over),
    "redis-restart": Fault(own_redis, restart_redis_empty),
    "broker-node": Fault(broker_cluster, lose_a_broker_node),
    "hands-partition": Fault(system_services, partition_a_hands, link_ttl_ms=PARTITION_TTL_MS),
    "slow-link": Fault(system_services, slow_a_hands_link, link_ttl_ms=SLOW_LINK_TTL_MS),
    "churn-storm": Fault(system_services, blow_a_churn_storm, tools=STORM_TOOLS),
}

LIMITS = "limits"
"""The limits soak's name (``bench._limits``)."""


# One run ---------------------------------------------------------------------------------------


async def soak(args: argparse.Namespace, name: str, tmp: Path) -> Row:
    """The workload through fault ``name`` on a deployment of its own; its row."""
    fault = FAULTS[name]
    _, namespace, schema = run_names("faults")
    started = time.monotonic()
    async with (
        fault.services(args, schema) as services,
        deployment(services.target, services.rabbitmq_url, services.redis_url, namespace, tmp) as c,
        contextlib.AsyncExitStack() as stack,
    ):
        await c.email.set_faults(delay=args.delay, drop_next=args.drops)
        c.start("brain-0", **services.env)
        c.start("brain-1", **services.env)
        if fault.link_ttl_ms:
            services.link = link = await stack.enter_async_context(c.link())
            ttl = {"BRAINHANDS_LEASE_TTL_MS": str(fault.link_ttl_ms)}
            c.start("hands-0", prefix=link.prefix, **services.env, **c.behind(link), **ttl)
        else:
            c.start("hands-0", **services.env)
        c.start("hands-1", **services.env)
        for n in range(args.batches):
            await c.submit_batches(1, tool=fault.tools[n % len(fault.tools)])
        await eventually(
            lambda: once_it_answers(lambda: c.operations_started(args.in_flight)),
            within=args.timeout,
            what=f"{args.in_flight} calls in flight",
        )
        injected = await fault.inject(c, services)
        healed = time.time()
        print(f"  {name}: {injected}", flush=True)
        with contextlib.suppress(AssertionError):
            await eventually(
                lambda: once_it_answers(c.all_done), within=args.timeout, what="the end"
            )
        row = await judge(c, name, injected, healed)
    row.seconds = time.monotonic() - started
    return row


async def judge(c: Cluster, name: str, injected: str, healed: float) -> Row:
    """Count, at the email service's ledger and in the store, what the fault cost."""
    ledger = await c.email.ledger()
    sent = Counter(notice_key(s["key"]) for s in ledger["sends"])
    sent_unsafe = Counter(notice_key(s["key"]) for s in ledger["unsafe_sends"])
    lost = duplicate = uncertain = failed = 0
    recovery: list[float] = []
    for session in c.sessions:
        tasks, operations = await c.store.queries.history(session)
        root = next(t for t in tasks if t.parent_id is None)
        if root.status != "terminal":
            lost += 1
        elif root.updated_at > healed:
            recovery.append(root.updated_at - healed)
        uncertain += sum(o.status == "uncertain" for o in operations)
        for notice in (t for t in tasks if t.kind == "send-notice"):
            key = notice.input[
                "key"
            ]  # sent under it, or under its operation ids (the tests' tools)
            times = sent_unsafe[key] if notice.input.get("tool") == UNSAFE else sent[key]
            duplicate += times > 1
            if notice.status != "terminal":
                lost += 1
            elif notice.outcome != "succeeded":
                failed += 1
    return Row(name, injected, len(c.sessions), lost, duplicate, uncertain, failed, recovery, 0.0)


def notice_key(key: str) -> str:
    """The notice an email was sent for: the notify example's tools send under the notice's
    key, the tests' tools under an operation id made of it (``{uid}:{key}/{send}``)."""
    return key.split(":", 1)[-1].rsplit("/", 1)[0]


# The report ------------------------------------------------------------------------------------


def seconds(samples: Sequence[float], q: float) -> str:
    return f"{percentile(list(samples), q):.1f}" if samples else "-"


def report(rows: Sequence[Row]) -> None:
    print()
    print_table(
        [
            "fault",
            "sessions",
            "lost",
            "duplicate",
            "uncertain",
            "failed",
            "recovery p50 s",
            "p99 s",
        ],
        [
            [
                r.fault,
                r.sessions,
                r.lost,
                r.duplicate,
                r.uncertain,
                r.failed,
                seconds(r.recovery, 50),
                seconds(r.recovery, 99),
            ]
            for r in rows
        ],
        align="<>>>>>>>",
    )
    for r in rows:
        print(f"{r.fault}: {r.injected}; the run took {r.seconds:.0f} s")
    bad = [r.fault for r in rows if r.lost or r.duplicate]
    verdict = f"LOST OR DUPLICATED under: {', '.join(bad)}" if bad else "0 lost, 0 duplicate"
    print(f"{verdict} (unsafe calls may end uncertain: at most once, never silently retried)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument(
        "--faults",
        nargs="+",
        choices=sorted([*FAULTS, LIMITS]),
        default=list(FAULTS),
        help=f"which faults ({LIMITS}: the limits soak, not run by default)",
    )
    parser.add_argument("--batches", type=int, default=30, help="sessions of 5 emails per fault")
    parser.add_argument(
        "--in-flight", type=int, default=8, help="calls started before the fault strikes"
    )
    parser.add_argument("--delay", type=float, default=0.2, help="seconds every send takes")
    parser.add_argument("--drops", type=int, default=5, help="receipts the service loses")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds a run may take")
    parser.add_argument(
        "--limit-calls", type=int, default=1000, help="calls to the 20/s tool (limits soak)"
    )
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    args = parser.parse_args(argv)
    if min(args.batches, args.in_flight, args.limit_calls) < 1 or args.delay < 0 or args.drops < 0:
        parser.error(
            "--batches, --in-flight and --limit-calls must be positive, "
            "--delay and --drops not negative"
        )
    return args


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    print(f"faults bench on {machine()}", flush=True)
    rows = []
    for name in args.faults:
        with tempfile.TemporaryDirectory(prefix=f"brainhands-bench-faults-{name}-") as tmp:
            if name == LIMITS:
                report_limits(*await soak_limits(args, Path(tmp)))
            else:
                rows.append(await soak(args, name, Path(tmp)))
    if rows:
        report(rows)
    print(f"({machine()})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main(parse_args()))
