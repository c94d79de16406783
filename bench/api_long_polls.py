"""What waiting costs the store: long polls (``GET .../submissions/{id}?wait=``) held open
on submissions that do not end.

Everything runs on PostgreSQL (a fresh schema, dropped at the end) and RabbitMQ under a
unique namespace. One API process (``python -m brainhands api --port 0``) and no Brain: W
sessions (``--waiters``) each get one submission through ``brainhands.Client``, which stays
``queued``. Then W requests, one per session, each ``?wait=60`` on its submission, are
opened on one key (its stream cap raised to fit) and left waiting. After ``--settle``
seconds (every first read done and counted: a PostgreSQL backend gone idle flushes its
counters 10 s later), the scans of every
table of the run's schema (``pg_stat_user_tables``: the store reads of everything this
run runs, which is the API alone) are counted over ``--window`` seconds, and compared
with the same window with no request open. A waiter that reads its submission again on a
timer costs one read per waiter per period; one woken by the change feed costs none
while nothing commits.

``--before REF`` first measures with the API process running commit REF's code (its tree
``git archive``d to a temporary directory), then this tree's, side by side.

    .venv/bin/python -m bench.api_long_polls [--waiters 1000] [--window 30] [--before REF]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx

from bench._services import (
    ROOT,
    Workers,
    add_service_urls,
    asyncpg_dsn,
    clean_namespace,
    extracted,
    new_parser,
    open_store,
    process_cpu,
    run_names,
    stop_on_sigterm,
    worker_env,
)
from bench._stats import machine, print_table
from bench.api import TENANT, wait_listening
from bench.api_lists import STATS_FLUSH, raise_fd_limit
from bench.roundtrip_agents import COMPAT
from brainhands.api.keys import create_key
from brainhands.client.direct import Client
from brainhands.shared.config import normalize_database_url
from brainhands.shared.topology import Topology

WAIT = 60
"""Seconds each request asks to wait (the most the API holds one)."""


@dataclass
class Results:
    waiters: int
    idle: float
    """Store reads a second with no request open."""
    waiting: float
    """Store reads a second with the waiters open."""
    answered_early: int
    """Requests that came back before the window ended (none expected)."""
    api_cpu: float
    """Seconds of CPU the API process used over the window."""


async def scans(conn: asyncpg.Connection, db_schema: str) -> int:
    """Scans of every table of ``db_schema`` PostgreSQL has counted so far."""
    total: int = await conn.fetchval(
        "SELECT coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0)::bigint"
        " FROM pg_stat_user_tables WHERE schemaname = $1",
        db_schema,
    )
    return total


async def reads_per_second(conn: asyncpg.Connection, db_schema: str, window: float) -> float:
    first = await scans(conn, db_schema)
    await asyncio.sleep(window)
    return (await scans(conn, db_schema) - first) / window


async def run(
    args: argparse.Namespace, namespace: str, db_schema: str, logs: Path, api_code: Path
) -> Results:
    async with contextlib.AsyncExitStack() as stack:
        store = await open_store(args.database_url, db_schema)
        stack.push_async_callback(store.close)
        _, key = await create_key(store, tenant=TENANT, scopes=["read", "submit"], name="bench")
        env = worker_env(
            args,
            namespace,
            db_schema,
            BRAINHANDS_API_MAX_STREAMS=str(args.waiters + 10),  # one key holds every wait
            BRAINHANDS_API_RATE="100000",
            BRAINHANDS_API_BURST="100000",
        )
        workers = stack.enter_context(Workers(env, logs))
        api = workers.start("api", "--port", "0", code=api_code)
        url = f"http://127.0.0.1:{await wait_listening(workers)}"
        client = await Client.connect(
            database_url=normalize_database_url(args.database_url),
            rabbitmq_url=args.rabbitmq_url,
            namespace=namespace,
            compat=COMPAT,
            database_schema=db_schema,
            tenant=TENANT,
        )
        stack.push_async_callback(client.close)
        # The wake-ups go to a Brain queue no Brain consumes: the submissions stay queued.
        await client.broker.topology.declare_brain(client.broker.channel, COMPAT)
        print(f"1. {args.waiters} sessions, a queued submission each", flush=True)
        ids = [f"lp{i:05d}" for i in range(args.waiters)]
        for session_id in ids:
            await client.submit(session_id, {"kind": "never", "input": {}}, request_id="r1")
        pg = await asyncpg.connect(asyncpg_dsn(args.database_url))
        stack.push_async_callback(pg.close)

        print(f"2. no request open: store reads over {args.window} s", flush=True)
        await asyncio.sleep(STATS_FLUSH)
        idle = await reads_per_second(pg, db_schema, args.window)

        room = args.waiters + 10
        http = httpx.AsyncClient(
            base_url=url,
            headers={"Authorization": f"Bearer {key}"},
            limits=httpx.Limits(max_connections=room, max_keepalive_connections=room),
            timeout=httpx.Timeout(30.0, read=WAIT + 30),
        )
        stack.push_async_callback(http.aclose)
        print(f"3. {args.waiters} requests ?wait={WAIT}: store reads over {args.window} s")
        opened = time.monotonic()
        waits = [
            asyncio.create_task(http.get(f"/sessions/{s}/submissions/r1", params={"wait": WAIT}))
            for s in ids
        ]
        await asyncio.sleep(args.settle)
        cpu = process_cpu(api.proc.pid) or 0.0
        waiting = await reads_per_second(pg, db_schema, args.window)
        api_cpu = (process_cpu(api.proc.pid) or 0.0) - cpu
        early = sum(1 for w in waits if w.done())
        assert time.monotonic() - opened < WAIT, "the window outlasted the waits"
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        return Results(args.waiters, idle, waiting, early, api_cpu)


async def measure(args: argparse.Namespace, logs: Path, api_code: Path) -> Results:
    _, namespace, db_schema = run_names("longpolls")
    print(f"namespace {namespace}, PostgreSQL schema {db_schema}", flush=True)
    try:
        return await run(args, namespace, db_schema, logs, api_code)
    finally:
        queues = Topology(namespace).brain_queues(COMPAT)
        await clean_namespace(args, namespace, queues, [db_schema])


def rows(results: Results) -> list[list[object]]:
    """The long-poll rows of a report (``bench.api``'s too)."""
    extra = results.waiting - results.idle
    return [
        ["store reads/s, no request open", f"{results.idle:.1f}"],
        [f"store reads/s, {results.waiters} long polls waiting", f"{results.waiting:.1f}"],
        ["... per waiter a second", f"{extra / results.waiters:.3f}"],
        ["API CPU over the window (s)", f"{results.api_cpu:.2f}"],
        ["requests answered before the window ended", str(results.answered_early)],
    ]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--waiters", type=int, default=1000, help="long polls held open")
    parser.add_argument("--window", type=float, default=30.0, help="seconds reads are counted")
    parser.add_argument(
        "--settle",
        type=float,
        default=2 * STATS_FLUSH + 1,
        help="seconds between opening the waits and counting",
    )
    parser.add_argument("--logs", help="keep the processes' logs in this directory")
    parser.add_argument(
        "--before",
        metavar="REF",
        help="first measure with the API process running this commit's code, then this tree's",
    )
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    args = parser.parse_args(argv)
    if args.waiters < 1 or args.settle + args.window >= WAIT - 5:
        parser.error(f"--waiters must be positive, --settle + --window under {WAIT - 5} s")
    return args


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    raise_fd_limit(args.waiters + 1024)
    print(f"api_long_polls bench on {machine()}", flush=True)
    runs: list[tuple[str, Results]] = []
    with tempfile.TemporaryDirectory(prefix="brainhands-bench-long-polls-") as tmp:
        logs = Path(args.logs or tmp)
        if args.before:
            with extracted(args.before) as old:
                print(f"\n== before: the API of {args.before}", flush=True)
                runs.append((f"before ({args.before})", await measure(args, logs / "before", old)))
            print("\n== after: the API of this tree", flush=True)
        runs.append(("this tree", await measure(args, logs / "after", ROOT)))
    table = [[row[0], *(rows(r)[i][1] for _, r in runs)] for i, row in enumerate(rows(runs[0][1]))]
    print()
    print_table(["long polls", *(label for label, _ in runs)], table, align="<" + ">" * len(runs))
    print(f"({machine()})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main(parse_args()))
