"""The plans of ``bench.history``: ``EXPLAIN (ANALYZE, BUFFERS)`` of the statements the
sweeper, the Brain and the relay run against the store, as the product itself builds them.

The statements are recorded (SQLAlchemy's ``before_cursor_execute``) while the product's own
functions run -- the sweeper's queries, a Brain's load and claim of a session, a relay's
claim and backlog reads -- and each is explained on its own afterwards, with the parameters
it ran with, in a transaction that is rolled back (the claim is an ``UPDATE``).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from brainhands.shared.store import Store

EXPLAIN_RUNS = 3
"""Each statement is explained this many times; the fastest run is kept (a warm cache)."""
_SCAN = re.compile(
    r"(Seq Scan|Index Only Scan|Index Scan|Bitmap Heap Scan)(?: using \S+)? on (\w+)"
)
_BUFFERS = re.compile(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?")
_TIME = re.compile(r"(Planning|Execution) Time: ([\d.]+) ms")
_TABLE = re.compile(r"\b(?:FROM|UPDATE|INTO)\s+(\w+)", re.IGNORECASE)


@dataclass(frozen=True)
class Statement:
    label: str
    sql: str
    params: tuple[Any, ...]


@dataclass(frozen=True)
class Plan:
    label: str
    planning_ms: float
    execution_ms: float
    hit: int
    read: int
    """Shared buffers of the plan's top node: found in the cache, read from disk."""
    seq_scans: tuple[str, ...]
    """Tables the plan reads from end to end."""
    text: str


@contextlib.contextmanager
def recording(engine: AsyncEngine) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    """Every statement ``engine`` runs within the block, with its parameters."""
    seen: list[tuple[str, tuple[Any, ...]]] = []

    def record(*args: Any) -> None:
        _conn, _cursor, statement, parameters, _context, _many = args
        seen.append((statement, tuple(parameters or ())))

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


async def hot_statements(
    store: Store, probe: str, unsent_ids: Sequence[str], fence: int
) -> list[Statement]:
    """What the sweeper, a Brain and a relay run: the sweeper's queries (its unsent-rows
    check for ``unsent_ids``), a Brain's load and claim of session ``probe`` (whose fence
    is ``fence``), a relay's claim of unsent rows and its backlog reading."""
    now = time.time()

    async def claim_rows() -> None:
        async with store.outbox.claim(100):
            pass

    def attention() -> Awaitable[object]:
        return store.queries.sessions_needing_attention(now=now, grace=1.0)

    def without_outcome() -> Awaitable[object]:
        return store.queries.calls_without_outcome(older_than=now - 15)

    calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("sweeper: sessions_needing_attention", attention),
        (
            "sweeper: sessions_with_unsent",
            lambda: store.outbox.sessions_with_unsent(list(unsent_ids)),
        ),
        ("sweeper: calls_without_outcome", without_outcome),
        ("Brain load", lambda: store.load(probe)),
        ("Brain claim", lambda: store.claim_session(probe, fence + 1)),
        ("relay: claim", claim_rows),
        ("relay: outbox_backlog", lambda: store.outbox.backlog()),
    ]
    found: list[Statement] = []
    for label, call in calls:
        with recording(store.backend.engine) as seen:
            await call()
        statements = [(sql, params) for sql, params in seen if _TABLE.search(sql)]
        for sql, params in statements:
            name = label
            if len(statements) > 1:
                table = _TABLE.search(sql)
                name = f"{label}: {sql.split()[0].upper()} {table.group(1) if table else '?'}"
            found.append(Statement(name, sql, params))
    return found


async def explain(db: asyncpg.Connection, statement: Statement) -> Plan:
    """The fastest of ``EXPLAIN_RUNS`` runs of ``statement``, each rolled back."""
    best: Plan | None = None
    for _ in range(EXPLAIN_RUNS):
        tx = db.transaction()
        await tx.start()
        try:
            rows = await db.fetch("EXPLAIN (ANALYZE, BUFFERS) " + statement.sql, *statement.params)
        finally:
            await tx.rollback()
        plan = parse_plan(statement.label, "\n".join(r[0] for r in rows))
        if best is None or plan.execution_ms < best.execution_ms:
            best = plan
    assert best is not None
    return best


def parse_plan(label: str, text: str) -> Plan:
    times = {kind: float(ms) for kind, ms in _TIME.findall(text)}
    buffers = _BUFFERS.search(text)
    hit, read = (int(n or 0) for n in buffers.groups()) if buffers else (0, 0)
    seq = tuple(dict.fromkeys(t for kind, t in _SCAN.findall(text) if kind == "Seq Scan"))
    return Plan(
        label, times.get("Planning", 0.0), times.get("Execution", 0.0), hit, read, seq, text
    )


async def explain_without(
    db: asyncpg.Connection, statements: Sequence[Statement], indexes: Sequence[str]
) -> tuple[list[Plan], dict[str, float]]:
    """The plans of ``statements`` with ``indexes`` dropped, and the seconds each index then
    takes to build again (what its migration costs on this store); all in one transaction
    that is rolled back, so the schema is left as it was."""
    tx = db.transaction()
    await tx.start()
    try:
        definitions = {}
        for name in indexes:
            definitions[name] = await db.fetchval(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND indexname = $1",
                name,
            )
            if definitions[name] is None:
                raise ValueError(f"no index {name} in the schema")
            await db.execute(f'DROP INDEX "{name}"')
        plans = [await explain(db, statement) for statement in statements]
        builds = {}
        for name, definition in definitions.items():
            start = time.perf_counter()
            await db.execute(definition)
            builds[name] = time.perf_counter() - start
        return plans, builds
    finally:
        await tx.rollback()
