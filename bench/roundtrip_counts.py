"""What a measured part of ``bench.roundtrip`` asked of the store, the broker and Redis,
counted where no other client of the machine can add to the count.

The store and Redis are the run's own servers (``bench/roundtrip_servers.py``); a ``Meter``
reads, at the start and the end of a part:

* **store write transactions**: transaction ids consumed, ``pg_snapshot_xmax`` of the
  current snapshot (reading it consumes none). Read-only transactions take no id, so they
  are left out, as DESIGN §3 counts. Exact and immediate (no statistics flush to wait for),
  and on the run's own server only its processes consume ids (autovacuum is off, as on the
  system server; the bench's ANALYZEs happen outside the parts);
* **store statements**: the ``calls`` of ``pg_stat_statements`` in the stores' database by
  every role but the harness's observer, transaction control (BEGIN, COMMIT, ROLLBACK,
  SAVEPOINT) left out: the statements that do the work, reads included. Updated when each
  statement ends, so exact and immediate too. (``pg_stat_database.xact_commit`` would add
  the read-only transactions, but a backend flushes it up to 10 s late, and the workers'
  background polls never let it settle; the statements row carries the reads instead);
* **store CPU**: user + system time of the own server's processes (the postmaster and its
  children), less the backends of the harness's observer and of the meter itself;
* **Redis commands**: ``INFO commandstats`` calls on the own Redis, the meter's INFO left out
  (and its CPU: the own ``redis-server``'s);
* **broker messages published and confirmed**: the broker is the shared RabbitMQ, whose
  counters others move, so they are counted on the client side instead: ``amqp_counting``
  wraps aiormq's ``Channel.basic_publish`` (every publish of every brainhands code path goes
  through it) and counts the publishes and the broker's acks, as Prometheus counters the
  workers' ``/metrics`` serve (they are started through ``bench.roundtrip_counted``) and
  the harness reads in its own process.

Everything that happens while a part runs is counted: the background polls of sweepers and
relays too, as they are part of what a call costs at that rate.
"""

from __future__ import annotations

import asyncio
import functools
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import asyncpg
from prometheus_client import REGISTRY, Counter

from bench._services import Workers, log_events, process_times
from brainhands.shared.lease import connect_redis

PUBLISHED = "bench_amqp_published_total"
CONFIRMED = "bench_amqp_confirmed_total"
TAIL = 0.5
"""Seconds a part's end waits for its trailing work (lease releases after the last commit)."""
CONTROL = r"^\s*(begin|commit|rollback|start transaction|savepoint|release|end)\b"


@dataclass
class Counts:
    """Counters at one moment, or what a part added to them (``minus``; parts together:
    ``plus``), or per call (``per``)."""

    xids: float = 0.0
    statements: float = 0.0
    store_cpu: float = 0.0
    redis: float = 0.0
    redis_cpu: float = 0.0
    published: float = 0.0
    confirmed: float = 0.0
    at: float = 0.0
    """Monotonic seconds: when the counters were read (a difference: the part's duration)."""

    def minus(self, before: Counts) -> Counts:
        return Counts(
            **{f.name: getattr(self, f.name) - getattr(before, f.name) for f in fields(self)}
        )

    def plus(self, other: Counts) -> Counts:
        return Counts(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def per(self, n: int) -> Counts:
        return Counts(**{f.name: getattr(self, f.name) / n for f in fields(self)})

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def server_cpu(postmaster: int, exclude: Iterable[int]) -> float:
    """CPU seconds the postmaster ``postmaster`` and its children alive now have used, but
    the processes ``exclude``."""
    skip = set(exclude)
    total = 0.0
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid in skip:
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if pid == postmaster or ppid == postmaster:
            total += sum(process_times(pid) or (0.0, 0.0))
    return total


class Meter:
    """Reads the counters of the run's own servers (and, through ``published``, the AMQP
    counts of the processes that publish)."""

    def __init__(
        self,
        admin_dsn: str,
        database: str,
        postmaster: int,
        redis_url: str | None,
        observer: str,
        redis_pid: int | None = None,
    ) -> None:
        self.admin_dsn = admin_dsn
        self.database = database
        self.postmaster = postmaster
        self.redis_url = redis_url
        self.observer = observer
        self.redis_pid = redis_pid
        self.excluded: set[int] = set()
        """Backend pids whose CPU is not the store's work (the observer's, the meter's)."""
        self._conn: asyncpg.Connection | None = None
        self._redis: Any = None

    async def __aenter__(self) -> Meter:
        self._conn = await asyncpg.connect(self.admin_dsn)
        self.excluded.add(await self._conn.fetchval("SELECT pg_backend_pid()"))
        if self.redis_url:
            self._redis = connect_redis(self.redis_url)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._conn is not None:
            await self._conn.close()
        if self._redis is not None:
            await self._redis.aclose()

    async def read(self, published: tuple[float, float] = (0.0, 0.0)) -> Counts:
        assert self._conn is not None
        xids = await self._conn.fetchval(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
        )
        statements = await self._conn.fetchval(
            "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid JOIN pg_roles r ON r.oid = s.userid "
            "WHERE d.datname = $1 AND r.rolname <> $2 AND s.query !~* $3",
            self.database,
            self.observer,
            CONTROL,
        )
        redis = 0.0
        if self._redis is not None:
            stats = await self._redis.info("commandstats")
            redis = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")
        cpu = server_cpu(self.postmaster, self.excluded)
        redis_cpu = sum(process_times(self.redis_pid) or (0.0, 0.0)) if self.redis_pid else 0.0
        return Counts(
            redis_cpu=redis_cpu,
            xids=float(xids),
            statements=float(statements),
            store_cpu=cpu,
            redis=float(redis),
            published=published[0],
            confirmed=published[1],
            at=time.monotonic(),
        )

    async def by_statement(self) -> dict[str, float]:
        """The ``calls`` of each statement (its normalized text, whitespace folded) so far,
        counted as ``read`` counts ``statements``."""
        assert self._conn is not None
        rows = await self._conn.fetch(
            "SELECT s.query, sum(s.calls) AS calls FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid JOIN pg_roles r ON r.oid = s.userid "
            "WHERE d.datname = $1 AND r.rolname <> $2 AND s.query !~* $3 GROUP BY s.query",
            self.database,
            self.observer,
            CONTROL,
        )
        return {" ".join(r["query"].split()): float(r["calls"]) for r in rows}


def statements_per(
    before: dict[str, float], after: dict[str, float], n: int
) -> list[tuple[float, str]]:
    """Each statement's calls between ``before`` and ``after``, per one of ``n``, most first."""
    moved = (((after[q] - before.get(q, 0.0)) / n, q) for q in after)
    return sorted((c, q) for c, q in moved if c > 0)[::-1]


# Broker messages, counted in the publishing processes -----------------------------------------


def amqp_counting() -> None:
    """Count this process's AMQP publishes and the broker's acks of them (idempotent)."""
    import aiormq
    from pamqp.commands import Basic

    channel = aiormq.Channel
    if getattr(channel.basic_publish, "_bench_counted", False):
        return
    published = Counter(PUBLISHED.removesuffix("_total"), "AMQP messages published")
    confirmed = Counter(CONFIRMED.removesuffix("_total"), "AMQP publishes the broker acked")
    original = channel.basic_publish

    @functools.wraps(original)
    async def basic_publish(self: Any, *args: Any, **kwargs: Any) -> Any:
        published.inc()
        result = await original(self, *args, **kwargs)
        if isinstance(result, Basic.Ack):
            confirmed.inc()
        return result

    basic_publish._bench_counted = True  # type: ignore[attr-defined]
    channel.basic_publish = basic_publish  # type: ignore[method-assign]


def local_amqp() -> tuple[float, float]:
    """This process's AMQP counts (0 where ``amqp_counting`` was not installed)."""
    get = REGISTRY.get_sample_value
    return (get(PUBLISHED) or 0.0, get(CONFIRMED) or 0.0)


def scrape_amqp(port: int) -> tuple[float, float]:
    """A worker's AMQP counts, from its ``/metrics`` on ``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    found = {PUBLISHED: 0.0, CONFIRMED: 0.0}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in found:
            found[name] = float(value)
    return found[PUBLISHED], found[CONFIRMED]


async def amqp_counts(ports: Iterable[int]) -> tuple[float, float]:
    """The AMQP counts of this process and of the workers serving ``/metrics`` on ``ports``."""
    total = list(local_amqp())
    for port in ports:
        got = await asyncio.to_thread(scrape_amqp, port)
        total = [total[0] + got[0], total[1] + got[1]]
    return total[0], total[1]


def health_port(events: Iterable[dict[str, Any]]) -> int | None:
    """The port a worker's log says it serves ``/metrics`` on."""
    for e in events:
        if e.get("event") == "health_listening":
            return int(e["port"])
    return None


async def take(meter: Meter | None, workers: Workers) -> Counts | None:
    """The counters now (None without a meter): the servers', and the AMQP counts of this
    process and of ``workers`` (those started through ``bench.roundtrip_counted``)."""
    if meter is None:
        return None
    ports = [health_port(log_events(path)) for w in workers.procs for path in [w.log]]
    published = await amqp_counts(p for p in ports if p is not None)
    return await meter.read(published)


async def part_end(meter: Meter | None, workers: Workers, start: Counts | None) -> Counts | None:
    """What a part that started at ``start`` counted, once its trailing work (``TAIL``) is in."""
    if meter is None or start is None:
        return None
    end = await take(meter, workers)
    assert end is not None
    return end.minus(start)
