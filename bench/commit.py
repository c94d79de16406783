"""How much ``Store.commit`` costs over the same transaction written against the bare driver.

One commit is the runtime's common case: one entry appended, one task moved on (status and
phase, guarded by its expected status) and one outbox row, all guarded by the session's
version and fence. Each variant commits sequentially on its own session of the same store:

* ``brainhands commit``: ``Store.commit`` of a ``Draft``;
* ``raw asyncpg`` / ``raw aiosqlite``: the statements ``Store.commit`` issues, sent with the
  bare driver on one connection (asyncpg prepared statements; aiosqlite with the store's
  PRAGMAs and ``BEGIN IMMEDIATE``). These are the denominators of the ratios;
* ``raw asyncpg, one statement``: the same writes as one statement of data-modifying CTEs,
  each fed by the guard's row, sent without BEGIN and COMMIT (a statement is atomic on its
  own): one round trip instead of six. On PostgreSQL ``Store.commit`` writes the draft so
  too (``shared/store/backends/postgres/chained.py``, which also fails the statement when
  the task's update matches no row, where this variant checks the count afterwards);
* ``raw sqlite3 sync``: the same with the stdlib module, blocking the event loop -- for
  information only, since the store never runs SQLite that way.

The variants take turns in rounds so machine noise hits them alike; each one's CPU is this
process's (``time.process_time``), the server's not counted. The target is that a commit
costs at most 1.5x the raw transaction at the median.

    .venv/bin/python -m bench.commit [--commits N] [--backend postgresql|sqlite]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg

from bench._rounds import run_rounds
from bench._services import add_service_urls, asyncpg_dsn, drop_schemas, new_parser, open_store
from bench._stats import percentile, print_table
from brainhands.shared.store import Draft, Store
from brainhands.shared.store.engine import SQLITE_BUSY_TIMEOUT_MS

TARGET_P50_RATIO = 1.5
DEFAULT_COMMITS = {"postgresql": 2000, "sqlite": 1000}

STATUSES = ("running", "waiting")
PHASES = ("plan", "act", "observe")
ENTRY_KIND = "note"
ROUTING_KEY = "brainhands.task.ready"
OUTBOX_BODY = json.dumps({"kind": "task.ready", "task_id": "x" * 32, "attempt": 1}).encode()


def entry_body(n: int) -> dict[str, Any]:
    return {"role": "assistant", "step": n, "text": f"step {n}: " + "thinking " * 20}


def outbox_headers(session_id: str) -> dict[str, str]:
    return {"session_id": session_id, "content-type": "application/json"}


class Variant:
    """One way of committing; keeps its session's version and its task's status."""

    label: str

    def __init__(self, session_id: str, task_id: str, version: int, fence: int) -> None:
        self.session_id = session_id
        self.task_id = task_id
        self.version = version
        self.fence = fence
        self.done = 0
        self.samples: list[float] = []
        self.elapsed = 0.0
        self.cpu = 0.0
        """CPU seconds of this process in all its commits, warm-up ones included."""

    def next_change(self) -> tuple[dict[str, Any], str, str, str]:
        """The entry body, expected status, new status and phase of the next commit."""
        n = self.done
        return entry_body(n), STATUSES[n % 2], STATUSES[(n + 1) % 2], PHASES[n % 3]

    async def step(self) -> None:
        started = time.process_time()
        await self.commit()
        self.cpu += time.process_time() - started

    async def commit(self) -> None:
        """One commit."""
        raise NotImplementedError


class Ours(Variant):
    label = "brainhands commit"

    def __init__(self, store: Store, *args: Any) -> None:
        super().__init__(*args)
        self.store = store

    async def commit(self) -> None:
        body, expected, status, phase = self.next_change()
        draft = Draft(self.session_id, version=self.version, fence=self.fence)
        draft.append_entry(ENTRY_KIND, body)
        draft.update_task(self.task_id, expected_status=expected, status=status, phase=phase)
        draft.add_outbox(ROUTING_KEY, OUTBOX_BODY, outbox_headers(self.session_id))
        receipt = await self.store.commit(draft)
        self.version = receipt.version
        self.done += 1


# The statements Store.commit issues (see shared/store/commit.py; checked with echo=True).
PG_GUARD = (
    "UPDATE session SET version = version + $1, entry_count = entry_count + $2, "
    "updated_at = $3 WHERE id = $4 AND version = $5 AND fence = $6 RETURNING entry_count"
)
PG_ENTRY = "INSERT INTO entry (session_id, seq, kind, body, created_at) VALUES ($1, $2, $3, $4, $5)"
PG_TASK = (
    "UPDATE task SET status = $1, phase = $2, updated_at = $3 "
    "WHERE id = $4 AND session_id = $5 AND status = $6"
)
# SQLAlchemy adds RETURNING id to a one-row insert of a table with an autoincrement key.
PG_OUTBOX = (
    "INSERT INTO outbox (session_id, routing_key, body, headers, created_at) "
    "VALUES ($1, $2, $3, $4, $5) RETURNING id"
)
SQLITE_GUARD = (
    "UPDATE session SET version = version + ?, entry_count = entry_count + ?, updated_at = ? "
    "WHERE id = ? AND version = ? AND fence = ? RETURNING entry_count"
)
SQLITE_ENTRY = "INSERT INTO entry (session_id, seq, kind, body, created_at) VALUES (?, ?, ?, ?, ?)"
SQLITE_TASK = (
    "UPDATE task SET status = ?, phase = ?, updated_at = ? "
    "WHERE id = ? AND session_id = ? AND status = ?"
)
SQLITE_OUTBOX = (
    "INSERT INTO outbox (session_id, routing_key, body, headers, created_at) "
    "VALUES (?, ?, ?, ?, ?)"  # no RETURNING: SQLAlchemy reads lastrowid on SQLite
)
SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=FULL",
    f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
    "PRAGMA foreign_keys=ON",
)


class RawAsyncpg(Variant):
    label = "raw asyncpg"

    def __init__(self, conn: asyncpg.Connection, *args: Any) -> None:
        super().__init__(*args)
        self.conn = conn

    async def prepare(self) -> None:
        self.guard = await self.conn.prepare(PG_GUARD)
        self.entry = await self.conn.prepare(PG_ENTRY)
        self.task = await self.conn.prepare(PG_TASK)
        self.outbox = await self.conn.prepare(PG_OUTBOX)

    async def commit(self) -> None:
        body, expected, status, phase = self.next_change()
        now = time.time()
        sid = self.session_id
        await self.conn.execute("BEGIN")
        try:
            seq = await self.guard.fetchval(1, 1, now, sid, self.version, self.fence)
            if seq is None:
                raise RuntimeError("guard failed")
            await self.entry.fetch(sid, seq, ENTRY_KIND, json.dumps(body), now)
            await self.task.fetch(status, phase, now, self.task_id, sid, expected)
            if self.task.get_statusmsg() != "UPDATE 1":
                raise RuntimeError("task update matched no row")
            headers = json.dumps(outbox_headers(sid))
            await self.outbox.fetchval(sid, ROUTING_KEY, OUTBOX_BODY, headers, now)
        except BaseException:
            await self.conn.execute("ROLLBACK")
            raise
        await self.conn.execute("COMMIT")
        self.version += 1
        self.done += 1


PG_ONE_STATEMENT = """
WITH g AS (
    UPDATE session SET version = version + $1, entry_count = entry_count + $2, updated_at = $3
    WHERE id = $4 AND version = $5 AND fence = $6 RETURNING entry_count
), e AS (
    INSERT INTO entry (session_id, seq, kind, body, created_at)
    SELECT $4, g.entry_count, $7, $8, $3 FROM g
), t AS (
    UPDATE task SET status = $9, phase = $10, updated_at = $3 FROM g
    WHERE task.id = $11 AND task.session_id = $4 AND task.status = $12 RETURNING task.id
), o AS (
    INSERT INTO outbox (session_id, routing_key, body, headers, created_at)
    SELECT $4, $13, $14, $15, $3 FROM g RETURNING id
)
SELECT g.entry_count, (SELECT count(*) FROM t) AS tasks, (SELECT id FROM o) AS outbox_id FROM g
"""


class RawAsyncpgOneStatement(RawAsyncpg):
    label = "raw asyncpg, one statement"

    async def prepare(self) -> None:
        self.statement = await self.conn.prepare(PG_ONE_STATEMENT)

    async def commit(self) -> None:
        body, expected, status, phase = self.next_change()
        now, sid = time.time(), self.session_id
        row = await self.statement.fetchrow(
            1, 1, now, sid, self.version, self.fence, ENTRY_KIND, json.dumps(body),
            status, phase, self.task_id, expected,
            ROUTING_KEY, OUTBOX_BODY, json.dumps(outbox_headers(sid)),
        )  # fmt: skip
        if row is None:
            raise RuntimeError("guard failed")
        if row["tasks"] != 1:
            raise RuntimeError("task update matched no row")
        self.version += 1
        self.done += 1


class RawAiosqlite(Variant):
    label = "raw aiosqlite"

    def __init__(self, db: aiosqlite.Connection, *args: Any) -> None:
        super().__init__(*args)
        self.db = db

    async def commit(self) -> None:
        body, expected, status, phase = self.next_change()
        now = time.time()
        sid, db = self.session_id, self.db
        await db.execute("BEGIN IMMEDIATE")
        try:
            guard = await db.execute(SQLITE_GUARD, (1, 1, now, sid, self.version, self.fence))
            rows = list(await guard.fetchall())
            if not rows:
                raise RuntimeError("guard failed")
            seq = rows[0][0]
            await db.execute(SQLITE_ENTRY, (sid, seq, ENTRY_KIND, json.dumps(body), now))
            task = await db.execute(SQLITE_TASK, (status, phase, now, self.task_id, sid, expected))
            if task.rowcount != 1:
                raise RuntimeError("task update matched no row")
            headers = json.dumps(outbox_headers(sid))
            await db.execute(SQLITE_OUTBOX, (sid, ROUTING_KEY, OUTBOX_BODY, headers, now))
        except BaseException:
            await db.execute("ROLLBACK")
            raise
        await db.execute("COMMIT")
        self.version += 1
        self.done += 1


class RawSqlite3(Variant):
    label = "raw sqlite3 sync"

    def __init__(self, db: sqlite3.Connection, *args: Any) -> None:
        super().__init__(*args)
        self.db = db

    async def commit(self) -> None:
        body, expected, status, phase = self.next_change()
        now = time.time()
        sid, db = self.session_id, self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            rows = db.execute(SQLITE_GUARD, (1, 1, now, sid, self.version, self.fence)).fetchall()
            if not rows:
                raise RuntimeError("guard failed")
            seq = rows[0][0]
            db.execute(SQLITE_ENTRY, (sid, seq, ENTRY_KIND, json.dumps(body), now))
            task = db.execute(SQLITE_TASK, (status, phase, now, self.task_id, sid, expected))
            if task.rowcount != 1:
                raise RuntimeError("task update matched no row")
            headers = json.dumps(outbox_headers(sid))
            db.execute(SQLITE_OUTBOX, (sid, ROUTING_KEY, OUTBOX_BODY, headers, now))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        self.version += 1
        self.done += 1


async def new_session(store: Store, label: str) -> tuple[str, str, int, int]:
    """A session with one running task: (session id, task id, version, fence)."""
    session_id = f"bench-{label}-{uuid.uuid4().hex[:8]}"
    await store.create_session(session_id, compat="bench")
    fence = await store.claim_session_fence(session_id, 1)
    draft = Draft(session_id, version=0, fence=fence)
    task_id = draft.add_task(
        kind="bench.step", kind_version=1, input={"goal": "bench"}, status=STATUSES[0]
    )
    receipt = await store.commit(draft)
    return session_id, task_id, receipt.version, fence


@dataclass
class Measured:
    backend: str
    variants: list[Variant]
    denominator: Variant
    info_only: set[str] = field(default_factory=set)


async def verify(store: Store, variants: Sequence[Variant], setup_version: int) -> None:
    """Every variant did the same amount of work: check what the store holds."""
    for variant in variants:
        state = await store.load(variant.session_id)
        expected_status = STATUSES[variant.done % 2]
        task_statuses = [t.status for t in state.open_tasks]
        ok = (
            state.session.version == setup_version + variant.done
            and state.session.entry_count == variant.done
            and task_statuses == [expected_status]
        )
        if not ok:
            raise RuntimeError(
                f"{variant.label}: session at version {state.session.version} with "
                f"{state.session.entry_count} entries and tasks {task_statuses}, expected "
                f"{setup_version + variant.done}, {variant.done} and [{expected_status!r}]"
            )


async def bench_postgres(url: str, commits: int, warmup: int, rounds: int) -> Measured:
    dsn = asyncpg_dsn(url)
    db_schema = f"bench_{uuid.uuid4().hex[:12]}"
    print(f"PostgreSQL: schema {db_schema}, {commits} commits per variant", flush=True)
    try:
        async with contextlib.AsyncExitStack() as stack:
            store = await open_store(url, db_schema)
            stack.push_async_callback(store.close)
            ours = Ours(store, *await new_session(store, "ours"))
            conn = await asyncpg.connect(dsn, server_settings={"search_path": db_schema})
            stack.push_async_callback(conn.close)
            raw = RawAsyncpg(conn, *await new_session(store, "raw"))
            await raw.prepare()
            one = RawAsyncpgOneStatement(conn, *await new_session(store, "one"))
            await one.prepare()
            variants: list[Variant] = [ours, raw, one]
            await run_rounds(variants, commits, warmup, rounds)
            await verify(store, variants, setup_version=1)
    finally:
        await drop_schemas(url, db_schema)
    return Measured("postgresql", variants, denominator=raw, info_only={one.label})


async def bench_sqlite(commits: int, warmup: int, rounds: int) -> Measured:
    with tempfile.TemporaryDirectory(prefix="brainhands-bench-") as tmp:
        path = Path(tmp) / "store.db"
        print(f"SQLite: {path}, {commits} commits per variant", flush=True)
        async with contextlib.AsyncExitStack() as stack:
            store = await Store.open(f"sqlite+aiosqlite:///{path}", upgrade=True)
            stack.push_async_callback(store.close)
            ours = Ours(store, *await new_session(store, "ours"))
            adb = await aiosqlite.connect(path, isolation_level=None, timeout=30)
            stack.push_async_callback(adb.close)
            sdb = sqlite3.connect(path, isolation_level=None, timeout=30)
            stack.callback(sdb.close)
            for pragma in SQLITE_PRAGMAS:
                await adb.execute(pragma)
                sdb.execute(pragma)
            raw = RawAiosqlite(adb, *await new_session(store, "raw"))
            sync = RawSqlite3(sdb, *await new_session(store, "sync"))
            variants: list[Variant] = [ours, raw, sync]
            await run_rounds(variants, commits, warmup, rounds)
            await verify(store, variants, setup_version=1)
    return Measured("sqlite", variants, denominator=raw, info_only={sync.label})


def report(results: Sequence[Measured]) -> None:
    headers = [
        "backend",
        "variant",
        "commits",
        "commits/s",
        "p50 ms",
        "p99 ms",
        "p50 vs raw",
        "commits/s vs raw",
        "CPU us",
        "CPU vs raw",
    ]
    rows: list[list[object]] = []
    verdicts: list[str] = []
    for result in results:
        base = result.denominator
        base_p50 = percentile(base.samples, 50)
        base_rate = len(base.samples) / base.elapsed
        base_cpu = base.cpu / base.done
        for variant in result.variants:
            p50 = percentile(variant.samples, 50)
            rate = len(variant.samples) / variant.elapsed
            label = variant.label
            if variant is base:
                label += " (denominator)"
            elif variant.label in result.info_only:
                label += " (info)"
            rows.append(
                [
                    result.backend,
                    label,
                    len(variant.samples),
                    f"{rate:,.0f}",
                    f"{p50 * 1000:.3f}",
                    f"{percentile(variant.samples, 99) * 1000:.3f}",
                    f"{p50 / base_p50:.2f}x",
                    f"{rate / base_rate:.2f}x",
                    f"{variant.cpu / variant.done * 1e6:.0f}",
                    f"{variant.cpu / variant.done / base_cpu:.2f}x",
                ]
            )
        ours = next(v for v in result.variants if isinstance(v, Ours))
        ratio = percentile(ours.samples, 50) / base_p50
        met = "MET" if ratio <= TARGET_P50_RATIO else "NOT MET"
        verdicts.append(
            f"{result.backend}: brainhands commit p50 is {ratio:.2f}x {base.label} "
            f"(target <= {TARGET_P50_RATIO}x): {met}"
        )
    print()
    print_table(headers, rows, align="<<>>>>>>>>")
    print()
    for verdict in verdicts:
        print(verdict)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument(
        "--commits",
        type=int,
        default=None,
        help="measured commits per variant (default: 2000 on PostgreSQL, 1000 on SQLite)",
    )
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured commits first")
    parser.add_argument(
        "--rounds", type=int, default=10, help="turns the variants take (noise hits all alike)"
    )
    add_service_urls(parser, "postgres")
    parser.add_argument(
        "--backend",
        choices=["all", "postgresql", "sqlite"],
        default="all",
        help="which backends to measure",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0 or (args.commits is not None and args.commits < 1):
        parser.error("--rounds and --commits must be positive, --warmup not negative")
    return args


async def main(args: argparse.Namespace) -> None:
    results: list[Measured] = []
    if args.backend in ("all", "postgresql"):
        commits = args.commits or DEFAULT_COMMITS["postgresql"]
        results.append(await bench_postgres(args.database_url, commits, args.warmup, args.rounds))
    if args.backend in ("all", "sqlite"):
        commits = args.commits or DEFAULT_COMMITS["sqlite"]
        results.append(await bench_sqlite(commits, args.warmup, args.rounds))
    report(results)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse_args()))
