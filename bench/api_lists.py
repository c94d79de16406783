"""The HTTP API's sessions-list streams (``GET /events``) with many watchers over two tenants.

Why: a commit used to cost every ``/events`` stream a list query of its own; now the API
reads a tenant's list once per commit heard of and hands that one page, encoded once, to
all of the tenant's streams (``brainhands.api.shared_lists``), and another tenant's commit
wakes none of them. This measures what that gives: the latency from a submission to each
watcher having the new session in its list, the API's CPU per event it delivered, how
many list reads PostgreSQL ran per commit, and that no stream hears of another tenant.

Everything runs on PostgreSQL (a fresh schema, migrated, dropped at the end), RabbitMQ and
Redis under a unique namespace; every process started is stopped and every queue deleted
at the end. One Brain (``brain --compat v1 --tasks tests.helpers.kinds``) and one API
process (``api --port 0``, its per-key request rate and stream caps raised out of the
way). Two API keys, of tenants ``acme`` and ``globex`` (``brainhands.api.keys.create_key``).

1. **Baseline.** ``--warmup`` sessions submitted with no stream open: the PostgreSQL work
   (scans of the run's ``session`` table) a commit costs without any list to read.
2. **Watchers.** W watchers (``--watchers``) of ``GET /events``, half with each tenant's
   key, and M (``--session-watchers``) of one ``acme`` session's ``/sessions/{id}/events``,
   all in this process through ``httpx.AsyncClient`` (one per 100 streams), opened
   ``--ramp`` at a time, each once the earlier ones had their first page.
3. **Commits.** K sessions (``--commits``), one at a time, taking turns between the two
   tenants, each with a new id and ``{"kind": "steps"}`` (three phases, then an answer)
   by ``POST /sessions/{id}/submissions?wait=30``. A (watcher, commit) pair's latency runs
   from just before that POST is sent to the reader task of a watcher of that tenant
   having read (``time.monotonic()`` when its bytes came in) the first ``sessions`` event
   listing the new id. Once all have it, ``--settle`` seconds more let the session's
   later commits reach the streams; the other tenant's watchers must have got no event
   in that window. The API process's CPU over the phase (``/proc``), divided by the events
   delivered to all watchers, is its cost per event.

The list reads per commit come from ``pg_stat_statements`` when the server has it loaded
(it is database-wide: another run on the same server adds to it). Otherwise from the
run's own ``session`` table (``pg_stat_user_tables``, this schema only): its scans per
commit with the watchers less those of the baseline are the list reads (a few per
submitted session: one per wake-up of its tenant's list, whatever the number of watchers;
a read per stream per wake-up, as before, would be that times W). PostgreSQL's counters
are read after an 11 s pause, for every backend to have flushed them.
``pg_stat_database.xact_commit`` is shown too, database-wide.

``--before REF`` first measures with the API process running commit REF's code (its tree
``git archive``d to a temporary directory; the Brain and the watchers are this tree's), then
with this tree's, and prints the two side by side: the before/after of one run.

    .venv/bin/python -m bench.api_lists [--watchers 1000] [--commits 30] [--session-watchers M]
        [--before REF]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
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
from bench._stats import machine, percentile, print_table
from bench.api import wait_listening
from brainhands.api.keys import create_key
from brainhands.shared.topology import Topology

COMPAT = "v1"
TASKS = "tests.helpers.kinds"
STEPS = {"kind": "steps", "input": {"x": 1}}
"""A ``tests.helpers.kinds`` task: three phases, three commits or so, then an answer."""
TENANTS = ("acme", "globex")
STREAMS_PER_CLIENT = 100
WATCHED = "watched"
"""The ``acme`` session the session watchers stream."""
STATS_FLUSH = 11.0
"""Seconds for PostgreSQL's backends to flush their statistics: a backend that goes idle
within a second of its last flush flushes 10 s later (PostgreSQL 15)."""
LIST_QUERY = "%FROM session%WHERE session.tenant = $%ORDER BY session.updated_at DESC%"
"""``brainhands.api.views.list_sessions``'s statement, as ``pg_stat_statements`` keeps it."""
ms = 1000.0


# Watchers -------------------------------------------------------------------------------------


@dataclass
class Target:
    """The session just submitted for ``tenant``: who of its watchers has it listed."""

    session_id: str
    sent: float
    """``time.monotonic()`` just before its ``POST`` was sent."""
    waiting: int
    needle: bytes = b""
    heard: list[float] = field(default_factory=list)
    """When each watcher of the tenant read the first event listing it."""
    all_heard: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        # A page is ``json.dumps({"sessions": [{"id": ...}, ...]})`` on one ``data:`` line.
        self.needle = json.dumps({"id": self.session_id})[1:-1].encode()


@dataclass(eq=False)
class Watcher:
    """One event stream, read by a task of its own: it counts the events (keep-alive
    comments aside) and, for a list stream, notes when it first lists its tenant's
    target session."""

    tenant: str
    path: str
    lists: bool
    events: int = 0
    first: asyncio.Event = field(default_factory=asyncio.Event)
    heard_id: str | None = None
    error: str | None = None

    async def run(self, http: httpx.AsyncClient, targets: dict[str, Target | None]) -> None:
        try:
            async with http.stream("GET", self.path) as response:
                if response.status_code != 200:
                    body = (await response.aread())[:200]
                    raise RuntimeError(f"{self.path}: {response.status_code} {body!r}")
                pending = b""
                async for chunk in response.aiter_raw():
                    now = time.monotonic()
                    pending += chunk
                    while (cut := pending.find(b"\n\n")) >= 0:
                        self.on_event(pending[:cut], now, targets)
                        pending = pending[cut + 2 :]
            raise RuntimeError(f"{self.path}: the API ended the stream")
        except Exception as exc:  # reported once the phase is over
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.first.set()  # an opener waiting for it goes on

    def on_event(self, event: bytes, now: float, targets: dict[str, Target | None]) -> None:
        if event.startswith(b":"):
            return  # a keep-alive
        self.events += 1
        self.first.set()
        if not self.lists:
            return
        target = targets[self.tenant]
        if target is not None and self.heard_id != target.session_id and target.needle in event:
            self.heard_id = target.session_id
            target.heard.append(now)
            target.waiting -= 1
            if target.waiting <= 0:
                target.all_heard.set()


@dataclass
class Streams:
    watchers: list[Watcher]
    tasks: list[asyncio.Task[None]]
    clients: list[httpx.AsyncClient]
    opened_in: float = 0.0

    def of(self, tenant: str, *, lists: bool = True) -> list[Watcher]:
        return [w for w in self.watchers if w.tenant == tenant and w.lists == lists]

    def events(self, watchers: Sequence[Watcher] | None = None) -> int:
        return sum(w.events for w in (self.watchers if watchers is None else watchers))

    def errors(self) -> list[str]:
        return [w.error for w in self.watchers if w.error]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for client in self.clients:
            await client.aclose()


def api_client(url: str, key: str, streams: int = 0) -> httpx.AsyncClient:
    room = streams + 10
    return httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": f"Bearer {key}"},
        limits=httpx.Limits(max_connections=room, max_keepalive_connections=room),
        timeout=httpx.Timeout(30.0, read=90.0),  # the API pings every stream each 15 s
    )


async def open_streams(
    args: argparse.Namespace, url: str, keys: dict[str, str], targets: dict[str, Target | None]
) -> Streams:
    """The list watchers, half of each tenant, and the session watchers (``acme``), each
    with its first event in, ``--ramp`` opening at once."""
    watchers = [
        Watcher(TENANTS[i % len(TENANTS)], "/events", lists=True) for i in range(args.watchers)
    ]
    watchers += [
        Watcher(TENANTS[0], f"/sessions/{WATCHED}/events", lists=False)
        for _ in range(args.session_watchers)
    ]
    streams = Streams(watchers, [], [])
    by_tenant: dict[str, list[Watcher]] = {}
    for w in watchers:
        by_tenant.setdefault(w.tenant, []).append(w)
    client_of: dict[int, httpx.AsyncClient] = {}
    for tenant, group in by_tenant.items():
        for start in range(0, len(group), STREAMS_PER_CLIENT):
            share = group[start : start + STREAMS_PER_CLIENT]
            client = api_client(url, keys[tenant], len(share))
            streams.clients.append(client)
            client_of.update((id(w), client) for w in share)
    opening = asyncio.Semaphore(args.ramp)
    started = time.monotonic()

    async def open_one(w: Watcher) -> None:
        async with opening:
            streams.tasks.append(asyncio.create_task(w.run(client_of[id(w)], targets)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(w.first.wait(), args.timeout)

    try:
        await asyncio.wait_for(asyncio.gather(*(open_one(w) for w in watchers)), args.timeout)
    except BaseException:
        await streams.close()
        raise
    streams.opened_in = time.monotonic() - started
    if streams.errors() or not all(w.events for w in watchers):
        await streams.close()
        missing = sum(1 for w in watchers if not w.events)
        raise RuntimeError(f"{missing} stream(s) did not open: {streams.errors()[:3]}")
    return streams


# PostgreSQL's counters ----------------------------------------------------------------------


class PgCounters:
    """What PostgreSQL counted: the list statements (``pg_stat_statements``, when it can be
    read), the scans of this run's ``session`` table, and the database's commits."""

    def __init__(self, conn: asyncpg.Connection, db_schema: str) -> None:
        self.conn, self.db_schema = conn, db_schema
        self.statements: str | None = None
        """Where ``pg_stat_statements`` is, or None when it cannot be read."""
        self.why_not = ""

    @classmethod
    async def connect(cls, database_url: str, db_schema: str) -> PgCounters:
        counters = cls(await asyncpg.connect(asyncpg_dsn(database_url)), db_schema)
        await counters._find_statements()
        return counters

    async def _find_statements(self) -> None:
        where = await self.conn.fetchval(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
            " WHERE e.extname = 'pg_stat_statements'"
        )
        try:
            async with self.conn.transaction():  # undone unless the view can be read
                if where is None:
                    # In this run's schema, so that dropping the schema drops it too.
                    create = "CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA"
                    await self.conn.execute(f'{create} "{self.db_schema}"')
                    where = self.db_schema
                await self.conn.fetchval(f'SELECT count(*) FROM "{where}".pg_stat_statements')
            self.statements = where
        except asyncpg.PostgresError as exc:
            self.why_not = str(exc).split("\n")[0]

    async def read(self) -> dict[str, int | None]:
        got: dict[str, int | None] = {"statements": None}
        if self.statements is not None:
            got["statements"] = await self.conn.fetchval(
                f'SELECT coalesce(sum(s.calls), 0)::bigint FROM "{self.statements}".'
                "pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                " WHERE d.datname = current_database() AND s.query LIKE $1",
                LIST_QUERY,
            )
        got["scans"] = await self.conn.fetchval(
            "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables"
            " WHERE schemaname = $1 AND relname = 'session'",
            self.db_schema,
        )
        got["xact_commit"] = await self.conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return got

    async def read_settled(self) -> dict[str, int | None]:
        """The counters once every backend has flushed what it counted."""
        await asyncio.sleep(STATS_FLUSH)
        return await self.read()

    async def close(self) -> None:
        await self.conn.close()


def per_commit(
    before: dict[str, int | None], after: dict[str, int | None], name: str, commits: int
) -> float | None:
    a, b = after.get(name), before.get(name)
    return None if a is None or b is None or not commits else (a - b) / commits


# Commits ------------------------------------------------------------------------------------


@dataclass
class Commit:
    tenant: str
    session_id: str
    posted: float
    """Seconds the ``POST ?wait=30`` took (until answered)."""
    latencies: list[float]
    heard_by: int
    watchers: int
    own_events: int
    """Events the tenant's list watchers got in the commit's window, all of them."""
    other_events: int
    """Events the other tenant's list watchers got in the window (0 expected)."""
    session_events: int
    """Events the session watchers got in the window (0 expected: their session is still)."""


async def submit(http: httpx.AsyncClient, session_id: str) -> float:
    started = time.monotonic()
    got = await http.post(
        f"/sessions/{session_id}/submissions",
        params={"wait": 30},
        json={"input": STEPS, "request_id": "r1"},
        timeout=60,
    )
    took = time.monotonic() - started
    answered = got.status_code == 200 and got.json().get("status") == "answered"
    if not answered:
        raise RuntimeError(f"session {session_id}: {got.status_code} {got.text[:300]}")
    return took


async def commit_once(
    args: argparse.Namespace,
    i: int,
    http: dict[str, httpx.AsyncClient],
    streams: Streams,
    targets: dict[str, Target | None],
    workers: Workers,
) -> Commit:
    tenant = TENANTS[i % len(TENANTS)]
    other = TENANTS[(i + 1) % len(TENANTS)]
    mine, theirs = streams.of(tenant), streams.of(other)
    still = [w for w in streams.watchers if not w.lists]
    counts = [streams.events(g) for g in (mine, theirs, still)]
    session_id = f"c{i:04d}"
    target = targets[tenant] = Target(session_id, time.monotonic(), waiting=len(mine))
    if not mine:
        target.all_heard.set()
    posted = await submit(http[tenant], session_id)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(target.all_heard.wait(), args.timeout)
    await asyncio.sleep(args.settle)  # the session's later commits shown too
    targets[tenant] = None
    workers.check_alive()
    own, foreign, quiet = (
        streams.events(g) - n for g, n in zip((mine, theirs, still), counts, strict=True)
    )
    return Commit(
        tenant,
        session_id,
        posted,
        [t - target.sent for t in target.heard],
        len(target.heard),
        len(mine),
        own,
        foreign,
        quiet,
    )


# The run --------------------------------------------------------------------------------------


@dataclass
class Phase:
    """CPU seconds per process and PostgreSQL's counters at one moment."""

    at: float
    cpu: dict[str, float]
    pg: dict[str, int | None]


@dataclass
class Results:
    commits: list[Commit] = field(default_factory=list)
    warmup: int = 0
    opened_in: float = 0.0
    delivered: int = 0
    """Events the watchers got during the commits."""
    baseline: tuple[dict[str, int | None], dict[str, int | None]] | None = None
    phase: tuple[Phase, Phase] | None = None
    statements: str | None = None
    why_not: str = ""
    errors: list[str] = field(default_factory=list)


def cpu_now(workers: Workers) -> dict[str, float]:
    used = workers.cpu()
    used["bench"] = process_cpu(os.getpid()) or 0.0
    return used


async def run(
    args: argparse.Namespace, namespace: str, db_schema: str, logs: Path, api_code: Path = ROOT
) -> Results:
    """One measurement; the API process runs the code of the tree ``api_code``."""
    results = Results(warmup=args.warmup)
    async with contextlib.AsyncExitStack() as stack:
        store = await open_store(args.database_url, db_schema)  # created and migrated
        stack.push_async_callback(store.close)
        keys = {
            t: (await create_key(store, tenant=t, scopes=["read", "submit"], name=f"bench-{t}"))[1]
            for t in TENANTS
        }
        pg = await PgCounters.connect(args.database_url, db_schema)
        stack.push_async_callback(pg.close)
        results.statements, results.why_not = pg.statements, pg.why_not
        env = worker_env(
            args,
            namespace,
            db_schema,
            BRAINHANDS_API_RATE="100000",
            BRAINHANDS_API_BURST="100000",
            BRAINHANDS_API_MAX_STREAMS="100000",
        )
        workers = stack.enter_context(Workers(env, logs))
        workers.start("brain", "--compat", COMPAT, "--tasks", TASKS)
        await workers.wait_consuming()
        workers.start("api", "--port", "0", code=api_code)
        url = f"http://127.0.0.1:{await wait_listening(workers)}"
        http = {t: api_client(url, keys[t]) for t in TENANTS}
        for client in http.values():
            stack.push_async_callback(client.aclose)

        if args.session_watchers:
            await submit(http[TENANTS[0]], WATCHED)
        print(f"1. baseline: {args.warmup} session(s) with no stream open", flush=True)
        before = await pg.read_settled()
        for i in range(args.warmup):
            await submit(http[TENANTS[i % len(TENANTS)]], f"w{i:04d}")
        results.baseline = (before, await pg.read_settled())

        print(
            f"2. opening {args.watchers} list watcher(s) and {args.session_watchers} session "
            f"watcher(s), {args.ramp} at a time",
            flush=True,
        )
        targets: dict[str, Target | None] = dict.fromkeys(TENANTS)
        streams = await open_streams(args, url, keys, targets)
        stack.push_async_callback(streams.close)
        results.opened_in = streams.opened_in
        print(f"   opened in {streams.opened_in:.1f} s", flush=True)

        print(f"3. {args.commits} sessions, one at a time, the tenants taking turns", flush=True)
        await asyncio.sleep(args.settle)  # the first pages all sent
        counted = await pg.read_settled()
        first = Phase(time.monotonic(), cpu_now(workers), counted)
        delivered = streams.events()
        for i in range(args.commits):
            results.commits.append(await commit_once(args, i, http, streams, targets, workers))
        results.delivered = streams.events() - delivered
        ended, cpu = time.monotonic(), cpu_now(workers)
        results.phase = (first, Phase(ended, cpu, await pg.read_settled()))
        results.errors = streams.errors()
    return results


# Report -----------------------------------------------------------------------------------------


def fmt_ms(samples: Sequence[float], p: float) -> str:
    return f"{percentile(samples, p) * ms:.1f}" if samples else "-"


def fmt_per(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


@dataclass(frozen=True)
class Figures:
    """What a run is judged by, for comparing two."""

    p50: str
    p99: str
    api_per_event: str
    list_reads: str
    other_tenant: str


def figures(r: Results) -> Figures:
    assert r.phase is not None and r.baseline is not None
    first, last = r.phase
    k = len(r.commits)
    pairs = [x for c in r.commits for x in c.latencies]
    api = last.cpu.get("api", 0.0) - first.cpu.get("api", 0.0)
    scans = per_commit(first.pg, last.pg, "scans", k)
    base = per_commit(*r.baseline, "scans", r.warmup)
    return Figures(
        p50=fmt_ms(pairs, 50),
        p99=fmt_ms(pairs, 99),
        api_per_event=f"{api / r.delivered * 1e6:.0f}" if r.delivered else "-",
        list_reads=fmt_per(None if scans is None or base is None else scans - base),
        other_tenant=f"{sum(c.other_events for c in r.commits) / max(1, k):.1f}",
    )


def report(args: argparse.Namespace, r: Results) -> None:
    assert r.phase is not None and r.baseline is not None
    first, last = r.phase
    k = len(r.commits)
    pairs = [x for c in r.commits for x in c.latencies]
    expected = sum(c.watchers for c in r.commits)
    posted = [c.posted for c in r.commits]
    per_watcher = [c.own_events / c.watchers for c in r.commits if c.watchers]
    wall = last.at - first.at
    used = {role: last.cpu.get(role, 0.0) - first.cpu.get(role, 0.0) for role in last.cpu}
    api = used.get("api", 0.0)
    per_event = f"{api / r.delivered * 1e6:.0f}" if r.delivered else "-"
    scans = per_commit(first.pg, last.pg, "scans", k)
    base = per_commit(*r.baseline, "scans", r.warmup)
    reads = None if scans is None or base is None else scans - base
    statements = per_commit(first.pg, last.pg, "statements", k)
    lists = args.watchers // len(TENANTS)
    per_watcher_reads = (
        "-"
        if reads is None
        else f"a read per stream per wake-up: ~{max(0.0, reads) * args.watchers:.0f}"
    )
    split = [len(range(j, args.watchers, len(TENANTS))) for j in range(len(TENANTS))]
    rows: list[list[object]] = [
        ["list watchers (GET /events)", f"{args.watchers}",
         f"{' + '.join(str(n) for n in split)} ({', '.join(TENANTS)}), "
         f"opened in {r.opened_in:.1f} s"],
        ["session watchers (/sessions/{id}/events)", f"{args.session_watchers}",
         f"of one {TENANTS[0]} session that does not change"],
        ["commits (sessions submitted, one at a time)", f"{k}", "the tenants taking turns"],
        ["commit -> list event p50 (ms)", fmt_ms(pairs, 50),
         f"{len(pairs)}/{expected} (watcher, commit) pairs heard"],
        ["commit -> list event p99 (ms)", fmt_ms(pairs, 99), "from the POST sent to the read"],
        ["commit -> list event max (ms)", fmt_ms(pairs, 100), ""],
        ["POST ?wait=30 until answered p50 (ms)", fmt_ms(posted, 50), "the session's whole run"],
        ["events per watcher of its tenant per commit",
         f"{sum(per_watcher) / len(per_watcher):.1f}" if per_watcher else "-",
         "one per change of the page (created, each phase, answered)"],
        ["events to the other tenant's watchers per commit",
         f"{sum(c.other_events for c in r.commits) / max(1, k):.1f}",
         f"over all ~{lists} of them; 0 expected"],
        ["events to the session watchers per commit",
         f"{sum(c.session_events for c in r.commits) / max(1, k):.1f}", "0 expected"],
        ["events delivered during the commits", f"{r.delivered}", f"in {wall:.1f} s"],
        ["API CPU during the commits (s)", f"{api:.2f}", f"{api / wall:.0%} of a core"],
        ["API CPU per delivered event (us)", per_event, "all its CPU (/proc) over the events"],
        ["Brain CPU during the commits (s)", f"{used.get('brain', 0.0):.2f}", ""],
        ["PostgreSQL CPU during the commits (s)", f"{used.get('PostgreSQL', 0.0):.2f}",
         "all its processes on this machine"],
        ["this process's CPU (the watchers, s)", f"{used.get('bench', 0.0):.2f}",
         f"{used.get('bench', 0.0) / wall:.0%} of a core: httpx reading every stream"],
        ["list queries per commit (pg_stat_statements)", fmt_per(statements),
         "database-wide" if r.statements else f"unreadable: {r.why_not}"],
        ["session-table scans per commit, watched", fmt_per(scans), "this schema only"],
        ["session-table scans per commit, no watcher", fmt_per(base),
         f"baseline, {r.warmup} session(s)"],
        ["-> list reads per commit (the difference)", fmt_per(reads), per_watcher_reads],
        ["xact_commit per commit", fmt_per(per_commit(first.pg, last.pg, "xact_commit", k)),
         "database-wide: other runs on the server count too"],
    ]  # fmt: skip
    missed = expected - len(pairs)
    print()
    print_table(["measure", "value", "notes"], rows, align="<><")
    if missed or r.errors:
        print(f"\n{missed} (watcher, commit) pair(s) never heard; stream errors: {r.errors[:5]}")


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        top = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        print(f"file descriptors: {soft} allowed, {needed} wanted", file=sys.stderr)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--watchers", type=int, default=1000, help="GET /events streams")
    parser.add_argument(
        "--session-watchers", type=int, default=0, help="streams of one session's events"
    )
    parser.add_argument("--commits", type=int, default=30, help="sessions submitted")
    parser.add_argument("--warmup", type=int, default=4, help="sessions with no stream open")
    parser.add_argument("--ramp", type=int, default=50, help="streams opening at once")
    parser.add_argument("--settle", type=float, default=0.5, help="seconds after each commit")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a step may take")
    parser.add_argument("--logs", help="keep the processes' logs in this directory")
    parser.add_argument(
        "--before",
        metavar="REF",
        help="first measure with the API process running this commit's code, then this tree's",
    )
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    args = parser.parse_args(argv)
    if min(args.watchers, args.commits, args.warmup, args.ramp) < 1 or args.session_watchers < 0:
        parser.error("counts must be positive (--session-watchers may be 0)")
    return args


async def measure(args: argparse.Namespace, logs: Path, api_code: Path) -> Results:
    _, namespace, db_schema = run_names("apilists")
    print(f"namespace {namespace}, PostgreSQL schema {db_schema}", flush=True)
    try:
        return await run(args, namespace, db_schema, logs, api_code)
    finally:
        queues = Topology(namespace).brain_queues(COMPAT)
        await clean_namespace(args, namespace, queues, [db_schema])


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    raise_fd_limit(args.watchers + args.session_watchers + 1024)  # the API's too: inherited
    print(f"api_lists bench on {machine()}", flush=True)
    runs: list[tuple[str, Results]] = []
    with tempfile.TemporaryDirectory(prefix="brainhands-bench-api-lists-") as tmp:
        logs = Path(args.logs or tmp)  # Workers makes it
        if args.before:
            with extracted(args.before) as old:
                print(f"\n== before: the API of {args.before}", flush=True)
                runs.append((f"before ({args.before})", await measure(args, logs / "before", old)))
            print("\n== after: the API of this tree", flush=True)
        runs.append(("this tree", await measure(args, logs / "after", ROOT)))
    for label, results in runs:
        print(f"\n-- {label}")
        report(args, results)
    if len(runs) == 2:
        (_, was), (_, now) = ((label, figures(r)) for label, r in runs)
        print("\n-- before -> after, same run")
        rows = [
            ["commit -> list event p50 (ms)", was.p50, now.p50],
            ["commit -> list event p99 (ms)", was.p99, now.p99],
            ["API CPU per delivered event (us)", was.api_per_event, now.api_per_event],
            ["list reads per commit", was.list_reads, now.list_reads],
            ["events to the other tenant per commit", was.other_tenant, now.other_tenant],
        ]
        print_table(["measure", runs[0][0], "this tree"], rows, align="<>>")
    print(f"({machine()})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main(parse_args()))
