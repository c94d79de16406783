"""What a lease costs: ``LeaseManager`` acquire + release next to a bare Redis lock.

Each sample is one acquisition and its release, timed together:

* ``LeaseManager acquire+release``: ``acquire(resource)`` (acquire.lua: check, fencing token
  INCR, SET PX) then ``release(lease)`` (release.lua: compare-and-delete), on a fresh
  resource each time, as Hands take one per operation;
* ``bare SET NX PX + DEL``: ``SET key <random owner> NX PX ttl`` then ``DEL key`` with
  ``redis.asyncio`` -- no token, no compare-and-delete. The denominator;
* ``acquire_fenced + store claim``: ``acquire_fenced`` whose claim is
  ``Store.claim_session_fence`` on PostgreSQL, then ``release``: what a session lease costs
  in full, for information (it is a Redis round trip plus a store transaction).

Both Redis clients come from ``shared.lease.connect_redis`` (same connection settings). The
variants take turns in rounds so machine noise hits them alike.

    .venv/bin/python -m bench.lease [-n N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from redis.asyncio import Redis
from sqlalchemy import text

from bench._stats import percentile, print_table
from shared.config import normalize_database_url
from shared.keys import Keys
from shared.lease import LeaseManager, connect_redis
from shared.store import Store
from shared.store.engine import write_transaction

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
TTL_MS = 10_000
BARE = "bare SET NX PX + DEL"
MANAGER = "LeaseManager acquire+release"
FENCED = "acquire_fenced + store claim"


@dataclass
class Variant:
    label: str
    step: Callable[[int], Awaitable[None]]
    """One timed acquire+release; its argument numbers the sample."""
    info: bool = False
    samples: list[float] = field(default_factory=list)


async def run_rounds(variants: Sequence[Variant], n: int, warmup: int, rounds: int) -> None:
    """Warm every variant up, then take turns: each round every variant does its share."""
    counter = 0
    for variant in variants:
        for _ in range(warmup):
            counter += 1
            await variant.step(counter)
    shares = [n // rounds + (1 if r < n % rounds else 0) for r in range(rounds)]
    perf = time.perf_counter
    for r, share in enumerate(shares):
        shift = r % len(variants)
        for variant in [*variants[shift:], *variants[:shift]]:
            gc.collect()
            samples = variant.samples
            for _ in range(share):
                counter += 1
                t0 = perf()
                await variant.step(counter)
                samples.append(perf() - t0)


def report(variants: Sequence[Variant]) -> None:
    base = next(v for v in variants if v.label == BARE)
    base_p50 = percentile(base.samples, 50)
    rows: list[list[object]] = []
    for v in variants:
        label = v.label + (" (denominator)" if v is base else "") + (" (info)" if v.info else "")
        p50 = percentile(v.samples, 50)
        rows.append(
            [
                label,
                len(v.samples),
                f"{p50 * 1e6:,.0f}",
                f"{percentile(v.samples, 99) * 1e6:,.0f}",
                f"{len(v.samples) / sum(v.samples):,.0f}",
                f"{p50 / base_p50:.2f}x",
            ]
        )
    print()
    print_table(
        ["variant", "n", "p50 µs", "p99 µs", "pairs/s", "p50 vs bare"], rows, align="<>>>>>"
    )
    manager = next(v for v in variants if v.label == MANAGER)
    extra = (percentile(manager.samples, 50) - base_p50) * 1e6
    print()
    print(
        f"LeaseManager adds {extra:,.0f} µs at the median over a bare SET NX PX + DEL "
        f"({percentile(manager.samples, 50) / base_p50:.2f}x)"
    )


async def delete_keys(redis: Redis, namespace: str) -> int:
    deleted = 0
    batch: list[bytes] = []
    async for key in redis.scan_iter(match=f"{namespace}:*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += await redis.delete(*batch)
            batch.clear()
    if batch:
        deleted += await redis.delete(*batch)
    return deleted


async def main(args: argparse.Namespace) -> None:
    tag = uuid.uuid4().hex[:10]
    namespace = f"benchlease_{tag}"
    db_schema = f"bench_lease_{tag}"
    database_url = normalize_database_url(args.database_url)
    print(
        f"lease: {args.n} acquire+release pairs per variant in {args.rounds} rounds; "
        f"Redis key prefix {namespace}:, PostgreSQL schema {db_schema}",
        flush=True,
    )
    keys = Keys(namespace)
    lease_redis = connect_redis(args.redis_url)
    bare_redis = connect_redis(args.redis_url)
    store: Store | None = None
    try:
        leases = LeaseManager(lease_redis, keys, ttl_ms=TTL_MS)

        async def manager_step(i: int) -> None:
            lease = await leases.acquire(f"operation:bench-{i}")
            if lease is None or not await leases.release(lease):
                raise RuntimeError("LeaseManager: acquire or release refused")

        async def bare_step(i: int) -> None:
            key = f"{namespace}:bare:{i}"
            if not await bare_redis.set(key, uuid.uuid4().hex, nx=True, px=TTL_MS):
                raise RuntimeError("bare SET NX refused")
            await bare_redis.delete(key)

        variants = [Variant(MANAGER, manager_step), Variant(BARE, bare_step)]
        if not args.no_store:
            store = await Store.open(database_url, upgrade=True, db_schema=db_schema)
            session_id = f"bench-{tag}"
            await store.create_session(session_id, compat="bench")
            claim_store = store

            async def claim(token: int) -> None:
                await claim_store.claim_session_fence(session_id, token)

            async def fenced_step(i: int) -> None:
                lease = await leases.acquire_fenced(f"session:{session_id}", claim)
                if lease is None or not await leases.release(lease):
                    raise RuntimeError("acquire_fenced: acquire or release refused")

            variants.append(Variant(FENCED, fenced_step, info=True))
        await run_rounds(variants, args.n, args.warmup, args.rounds)
        report(variants)
    finally:
        await delete_keys(lease_redis, namespace)
        await lease_redis.aclose()
        await bare_redis.aclose()
        if store is not None:
            async with write_transaction(store.engine) as conn:
                await conn.execute(text(f'DROP SCHEMA IF EXISTS "{db_schema}" CASCADE'))
            await store.close()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("-n", type=int, default=5000, help="measured pairs per variant")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured pairs first")
    parser.add_argument("--rounds", type=int, default=10, help="turns the variants take")
    parser.add_argument(
        "--no-store", action="store_true", help="skip the acquire_fenced + store claim row"
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BRAINHANDS_BENCH_POSTGRES_URL", DEFAULT_PG_URL),
        help="PostgreSQL to use (default: $BRAINHANDS_BENCH_POSTGRES_URL or %(default)s)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BRAINHANDS_BENCH_REDIS_URL", DEFAULT_REDIS_URL),
        help="Redis to use (default: $BRAINHANDS_BENCH_REDIS_URL or %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("-n and --rounds must be positive, --warmup not negative")
    return args


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse_args()))
