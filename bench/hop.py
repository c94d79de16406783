"""What one trip to a service costs this process in CPU: our store's hop against the bare
drivers, and the round trip of the event loop itself.

A Brain spends about half its CPU in the store and does some 25 store hops, 6 Redis and 6
RabbitMQ round trips per one-call session: the price of one round trip bounds how low its
CPU per session can go. The variants, on one PostgreSQL schema migrated to head:

* ``store hop``: ``Store.arrivals()`` -- a holder's mid-pass read of a session's inbox and queued
  submissions, one statement on PostgreSQL -- as the runtime runs it: one greenlet on a
  connection of SQLAlchemy's pool, its hot statements (``shared.store.hot``) sent to the
  driver;
* the inbox and queued submissions as two statements executed by SQLAlchemy (what the
  runtime did before hot statements); a hop that marks one outbox row sent (a statement with
  an ``IN`` list, rendered at each execution), hot and through SQLAlchemy;
* a whole session's rows (4 entries, a document, 3 waiting tasks, a running submission) as a
  claim reads them: one statement of JSON aggregates, as the runtime does on PostgreSQL, and
  a hot statement per row kind (as on SQLite, and on PostgreSQL before);
* ``asyncpg pool``: the same two statements (compiled once from the same SQLAlchemy
  constructs), on a connection acquired from an asyncpg pool;
* the same on an asyncpg pool whose release runs no reset query (by default it runs one:
  a round trip);
* ``asyncpg connection``: the same two on one connection held throughout;
* ``asyncpg SELECT 1`` and ``redis PING``: one round trip on a held connection, the least
  an awaited answer from another process costs on this event loop.

The variants take turns in rounds; CPU is this process's (``time.process_time``).

    .venv/bin/python -m bench.hop [--calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from redis.asyncio import Redis
from sqlalchemy.engine import Connection

from bench._rounds import run_rounds
from bench._services import add_service_urls, asyncpg_dsn, drop_schemas, new_parser, open_store
from bench._stats import machine, percentile, print_table
from brainhands.shared.store import Draft
from brainhands.shared.store.backends.postgres.rows import ROWS_AS_JSON
from brainhands.shared.store.hot import run
from brainhands.shared.store.load import _OPEN_SUBMISSIONS, _UNAPPLIED_INBOX, ROWS_BY_KIND
from brainhands.shared.store.outbox import _MARK_SENT
from brainhands.shared.store.store import Store


@dataclass
class Variant:
    """One way of making the trip; ``call`` is measured in wall and CPU time."""

    label: str
    call: Callable[[], Awaitable[object]]
    samples: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    cpu: float = 0.0
    calls: int = 0

    async def step(self) -> None:
        started = time.process_time()
        await self.call()
        self.cpu += time.process_time() - started
        self.calls += 1


def compiled(store: Store, statement: Any, session_id: str) -> tuple[str, list[Any]]:
    """``statement`` as the SQL text SQLAlchemy sends to asyncpg, and its arguments for
    ``session_id`` (bound as ``sid``)."""
    done = statement.compile(dialect=store.backend.engine.dialect)
    state = done.construct_expanded_state({"sid": session_id})
    return state.statement, [state.parameters[name] for name in state.positiontup or ()]


async def _seed(store: Store, session_id: str) -> None:
    """A session with what a turn finds: entries, a document, open tasks, a submission."""
    await store.create_session(session_id, compat="v1")
    await store.claim_session_fence(session_id, 1)
    draft = Draft(session_id, version=0, fence=1)
    for i in range(4):
        draft.append_entry("note", {"text": "a model turn " * 8, "i": i})
    draft.put_document("notes", {"seen": [1, 2, 3]}, expected_version=None)
    for i in range(3):
        draft.add_task(kind="k", kind_version=1, input={"i": i}, status="waiting")
    draft.add_submission(request_id="r1", input={"text": "ping"}, status="running")
    await store.commit(draft)


async def _keep(_conn: asyncpg.Connection) -> None:
    """No reset query on release: our hops leave no session state behind."""


async def measure(args: argparse.Namespace) -> list[Variant]:
    db_schema = f"bench_hop_{uuid.uuid4().hex[:12]}"
    session_id = "hop-session"
    try:
        async with contextlib.AsyncExitStack() as stack:
            store = await open_store(args.database_url, db_schema)
            stack.push_async_callback(store.close)
            await _seed(store, session_id)
            settings = {"search_path": db_schema}
            dsn = asyncpg_dsn(args.database_url)
            pool = await asyncpg.create_pool(dsn, min_size=2, max_size=2, server_settings=settings)
            stack.push_async_callback(pool.close)
            lean = await asyncpg.create_pool(
                dsn, min_size=2, max_size=2, server_settings=settings, reset=_keep
            )
            stack.push_async_callback(lean.close)
            held = await asyncpg.connect(dsn, server_settings=settings)
            stack.push_async_callback(held.close)
            redis = Redis.from_url(args.redis_url)
            stack.push_async_callback(redis.aclose)
            inbox = compiled(store, _UNAPPLIED_INBOX.statement, session_id)
            queued = compiled(store, _OPEN_SUBMISSIONS.statement, session_id)

            async def store_hop() -> object:
                return await store.arrivals(session_id, queued=True)

            def through_sqlalchemy(conn: Connection) -> object:
                conn.execute(_UNAPPLIED_INBOX.statement, {"sid": session_id}).all()
                return conn.execute(_OPEN_SUBMISSIONS.statement, {"sid": session_id}).all()

            async def sqlalchemy_hop() -> object:
                return await store.backend.read(through_sqlalchemy)

            async def mark_hot() -> object:
                return await store.backend.write(
                    lambda c: run(c, _MARK_SENT, {"ids": [1], "now": 1.0}), single_statement=True
                )

            async def mark_sqlalchemy() -> object:
                return await store.backend.write(
                    lambda c: c.execute(_MARK_SENT.statement, {"ids": [1], "now": 1.0}),
                    single_statement=True,
                )

            async def rows_as_json() -> object:
                return await store.backend.read(
                    lambda c: ROWS_AS_JSON.read(c, [session_id], [], False)
                )

            async def rows_by_kind() -> object:
                return await store.backend.read(
                    lambda c: ROWS_BY_KIND.read(c, [session_id], [], False)
                )

            async def pooled() -> object:
                async with pool.acquire() as conn:
                    await conn.fetch(inbox[0], *inbox[1])
                    return await conn.fetch(queued[0], *queued[1])

            async def pooled_lean() -> object:
                async with lean.acquire() as conn:
                    await conn.fetch(inbox[0], *inbox[1])
                    return await conn.fetch(queued[0], *queued[1])

            async def on_held() -> object:
                await held.fetch(inbox[0], *inbox[1])
                return await held.fetch(queued[0], *queued[1])

            async def select_one() -> object:
                return await held.fetchval("SELECT 1")

            async def ping() -> object:
                return await redis.ping()

            variants = [
                Variant("store hop: arrivals(), 1 statement, as the runtime runs it", store_hop),
                Variant("inbox and queued submissions, 2 statements by SQLAlchemy", sqlalchemy_hop),
                Variant("store hop: mark one outbox row sent (an IN list)", mark_hot),
                Variant("the same hop, executed by SQLAlchemy", mark_sqlalchemy),
                Variant("store hop: a session's rows, 1 statement (JSON)", rows_as_json),
                Variant("the same rows, a hot statement per row kind", rows_by_kind),
                Variant("the same 2 statements, asyncpg pool", pooled),
                Variant("the same, asyncpg pool without its reset query", pooled_lean),
                Variant("the same 2 statements, one asyncpg connection", on_held),
                Variant("one round trip: asyncpg SELECT 1", select_one),
                Variant("one round trip: redis PING", ping),
            ]
            await run_rounds(variants, args.calls, args.warmup, args.rounds)
            for variant in variants:  # the warm-up is not counted
                variant.cpu *= args.calls / variant.calls
                variant.calls = args.calls
    finally:
        await drop_schemas(args.database_url, db_schema)
    return variants


def report(variants: Sequence[Variant]) -> None:
    base = variants[0]
    rows = [
        [
            v.label,
            v.calls,
            f"{v.cpu / v.calls * 1e6:.0f}",
            f"{v.cpu / base.cpu:.2f}x",
            f"{percentile(v.samples, 50) * 1e6:.0f}",
        ]
        for v in variants
    ]
    print()
    print_table(
        ["variant", "calls", "CPU us per call", "CPU vs store hop", "wall p50 us"],
        rows,
        align="<>>>>",
    )
    print()
    print(f"({machine()})")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--calls", type=int, default=3000, help="measured calls per variant")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured calls first")
    parser.add_argument("--rounds", type=int, default=10, help="turns the variants take")
    add_service_urls(parser, "postgres", "redis")
    args = parser.parse_args(argv)
    if args.calls < args.rounds or args.rounds < 1 or args.warmup < 0:
        parser.error("--calls must be at least --rounds, which must be positive")
    return args


async def main(args: argparse.Namespace) -> None:
    print(f"hop bench on {machine()}: {args.calls} calls per variant", flush=True)
    report(await measure(args))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse_args()))
