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
import functools
import itertools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from bench._rounds import run_rounds
from bench._services import (
    add_service_urls,
    clean_up,
    delete_redis_keys,
    drop_schemas,
    new_parser,
    open_store,
    run_names,
)
from bench._stats import percentile, print_table
from brainhands.shared.keys import Keys, operation_resource, session_resource
from brainhands.shared.lease import LeaseManager, connect_redis
from brainhands.shared.store import Store

TTL_MS = 10_000
BARE = "bare SET NX PX + DEL"
MANAGER = "LeaseManager acquire+release"
FENCED = "acquire_fenced + store claim"


@dataclass
class Variant:
    label: str
    step: Callable[[], Awaitable[None]]
    """One timed acquire+release."""
    info: bool = False
    samples: list[float] = field(default_factory=list)
    elapsed: float = 0.0


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


async def main(args: argparse.Namespace) -> None:
    tag, namespace, db_schema = run_names("lease")
    print(
        f"lease: {args.n} acquire+release pairs per variant in {args.rounds} rounds; "
        f"Redis key prefix {namespace}:, PostgreSQL schema {db_schema}",
        flush=True,
    )
    keys = Keys(namespace)
    lease_redis = connect_redis(args.redis_url)
    bare_redis = connect_redis(args.redis_url)
    store: Store | None = None
    numbers = itertools.count(1)  # a sample's number, unique across the variants
    try:
        leases = LeaseManager(lease_redis, keys, ttl_ms=TTL_MS)

        async def manager_step() -> None:
            lease = await leases.acquire(operation_resource(f"bench-{next(numbers)}"))
            if lease is None or not await leases.release(lease):
                raise RuntimeError("LeaseManager: acquire or release refused")

        async def bare_step() -> None:
            key = f"{namespace}:bare:{next(numbers)}"
            if not await bare_redis.set(key, uuid.uuid4().hex, nx=True, px=TTL_MS):
                raise RuntimeError("bare SET NX refused")
            await bare_redis.delete(key)

        variants = [Variant(MANAGER, manager_step), Variant(BARE, bare_step)]
        if not args.no_store:
            store = await open_store(args.database_url, db_schema)
            session_id = f"bench-{tag}"
            await store.create_session(session_id, compat="bench")
            claim_store = store

            async def claim(token: int) -> None:
                await claim_store.claim_session_fence(session_id, token)

            async def fenced_step() -> None:
                lease = await leases.acquire_fenced(session_resource(session_id), claim)
                if lease is None or not await leases.release(lease):
                    raise RuntimeError("acquire_fenced: acquire or release refused")

            variants.append(Variant(FENCED, fenced_step, info=True))
        await run_rounds(variants, args.n, args.warmup, args.rounds)
        report(variants)
    finally:
        await lease_redis.aclose()
        await bare_redis.aclose()
        steps = [("Redis", functools.partial(delete_redis_keys, args.redis_url, f"{namespace}:"))]
        if store is not None:
            await store.close()
            steps.append(
                ("PostgreSQL", functools.partial(drop_schemas, args.database_url, db_schema))
            )
        await clean_up(*steps)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("-n", type=int, default=5000, help="measured pairs per variant")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured pairs first")
    parser.add_argument("--rounds", type=int, default=10, help="turns the variants take")
    parser.add_argument(
        "--no-store", action="store_true", help="skip the acquire_fenced + store claim row"
    )
    add_service_urls(parser, "postgres", "redis")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("-n and --rounds must be positive, --warmup not negative")
    return args


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse_args()))
