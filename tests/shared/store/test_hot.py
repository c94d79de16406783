"""Hot statements on PostgreSQL: sent on the driver connection inside a store hop, they read
as SQLAlchemy's results do, and a hop that fails leaves nothing behind -- no half-written
transaction, no connection in a state the next hop would trip over."""

from __future__ import annotations

import asyncio
import gc
import logging
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import bindparam, func, insert, select
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.engine import Connection

from brainhands.shared.config import normalize_database_url
from brainhands.shared.errors import ConflictError, StoreError, StoreUnavailable
from brainhands.shared.store import Store, schema
from brainhands.shared.store.backends import postgres as backend_module
from brainhands.shared.store.backends.postgres.hot import compile_once
from brainhands.shared.store.hot import hot, run
from tests.helpers.stores import drop_schema

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

_e = schema.entry
ENTRIES = hot(select(_e.c.seq, _e.c.body).where(_e.c.session_id == bindparam("sid")))
SOME_ENTRIES = hot(
    select(_e.c.seq, _e.c.body)
    .where(_e.c.session_id == bindparam("sid"), _e.c.seq.in_(bindparam("seqs", expanding=True)))
    .order_by(_e.c.seq)
)
INSERT_ENTRY = hot(insert(_e))
SLEEP = hot(select(func.pg_sleep(bindparam("seconds"))))
BACKEND_PID = hot(select(func.pg_backend_pid()))


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[Store]:
    """A migrated store in a schema of its own, on a pool of one connection."""
    url, db_schema = normalize_database_url(postgres_url), f"t{uuid.uuid4().hex[:12]}"
    store = await Store.open(url, upgrade=True, db_schema=db_schema, pool_size=1)
    await store.create_session("s1", compat="v1")
    yield store
    await store.close()
    await drop_schema(url, db_schema)


def entry(seq: int, body: object) -> dict[str, object]:
    return {"session_id": "s1", "seq": seq, "kind": "note", "body": body, "created_at": 1.0}


async def terminate(postgres_url: str, pid: int) -> None:
    """End the server side of connection ``pid``, as a server restart would."""
    admin = await asyncpg.connect(postgres_url)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()


async def entries(store: Store) -> list[tuple[int, object]]:
    rows = await store.backend.read(lambda c: run(c, ENTRIES, {"sid": "s1"}).all())
    return [(r.seq, r.body) for r in rows]


async def test_rows_read_as_sqlalchemys_and_json_goes_both_ways(pg_store: Store) -> None:
    bodies = [{"text": "héllo", "n": [1, 2.5, None]}, None, "plain"]
    await pg_store.backend.write(
        lambda c: run(c, INSERT_ENTRY, [entry(i, b) for i, b in enumerate(bodies, 1)]),
    )

    def both(conn: Connection) -> tuple[list[object], list[object]]:
        hot_rows = run(conn, ENTRIES, {"sid": "s1"}).all()
        plain = conn.execute(ENTRIES.statement, {"sid": "s1"}).all()
        return [(r.seq, r._mapping, r[1]) for r in hot_rows], [
            (r.seq, dict(r._mapping), r[1]) for r in plain
        ]

    hot_rows, plain = await pg_store.backend.read(both)
    assert hot_rows == plain
    assert [body for _, _, body in hot_rows] == bodies


async def test_an_in_list_is_rendered_for_its_length_each_time(pg_store: Store) -> None:
    await pg_store.backend.write(
        lambda c: run(c, INSERT_ENTRY, [entry(i, {"n": i}) for i in range(1, 6)]),
    )
    for seqs in ([3], [1, 5], [2, 3, 4], []):
        params = {"sid": "s1", "seqs": seqs}

        def both(conn: Connection, p: dict[str, object] = params) -> tuple[object, object]:
            hot_rows = [(r.seq, r.body) for r in run(conn, SOME_ENTRIES, p)]
            plain = [(r.seq, r.body) for r in conn.execute(SOME_ENTRIES.statement, p)]
            return hot_rows, plain

        hot_rows, plain = await pg_store.backend.read(both)
        assert hot_rows == plain == [(n, {"n": n}) for n in seqs]


def test_an_in_lists_rendering_is_kept_per_length_and_bound_as_sqlalchemy_binds_it() -> None:
    # A JSON value that is a list is a value, not an IN list.
    statement = hot(
        select(_e.c.seq)
        .where(_e.c.seq.in_(bindparam("seqs", expanding=True)), _e.c.body == bindparam("body"))
        .where(_e.c.session_id.in_(bindparam("sids", expanding=True)))
    )
    compiled = compile_once(statement, asyncpg_dialect.dialect(), None)
    assert compiled.expanding is not None
    for params in (
        {"seqs": [3, 4], "sids": ["a"], "body": [1, 2]},
        {"seqs": [5, 6], "sids": ["b"], "body": {"n": 1}},  # the same lengths, other values
        {"seqs": [], "sids": ["c", "d", "e"], "body": None},
        {"body": [], "sids": ["f"], "seqs": [7]},  # the keys in another order
    ):
        state = compiled.expanding.construct_expanded_state(params, escape_names=False)
        expected = [
            state.processors[name](state.parameters[name])
            if name in state.processors
            else state.parameters[name]
            for name in state.positiontup or ()
        ]
        assert compiled.bound(params) == (state.statement, expected)


async def test_a_refused_hop_rolls_back_what_it_wrote_and_its_connection_goes_on(
    pg_store: Store,
) -> None:
    def write_then_refuse(conn: Connection) -> None:
        run(conn, INSERT_ENTRY, entry(1, "written, then rolled back"))
        raise ConflictError("refused after the first write")

    with pytest.raises(ConflictError):
        await pg_store.backend.write(write_then_refuse)

    pids = set()
    for _ in range(3):  # the one pooled connection, kept: no transaction left open on it
        pids.add(await pg_store.backend.read(lambda c: run(c, BACKEND_PID, {}).scalar()))
        assert await entries(pg_store) == []
    assert len(pids) == 1


async def test_a_value_that_cannot_be_bound_is_a_store_error_and_writes_nothing(
    pg_store: Store,
) -> None:
    rows = [entry(1, "fine"), entry(2, {"a set": {1, 2}})]
    with pytest.raises(StoreError, match="body"):
        await pg_store.backend.write(lambda c: run(c, INSERT_ENTRY, rows))
    assert await entries(pg_store) == []


async def test_a_hop_whose_connection_the_server_cut_is_retryable_and_the_next_reconnects(
    pg_store: Store, postgres_url: str
) -> None:
    pid = await pg_store.backend.read(lambda c: run(c, BACKEND_PID, {}).scalar())
    await terminate(postgres_url, pid)

    with pytest.raises(StoreUnavailable):
        await pg_store.backend.write(lambda c: run(c, INSERT_ENTRY, entry(1, "x")))
    await pg_store.backend.write(lambda c: run(c, INSERT_ENTRY, entry(1, "y")))
    assert await entries(pg_store) == [(1, "y")]


def write_and_wait(conn: Connection, seq: int) -> None:
    run(conn, INSERT_ENTRY, entry(seq, seq))
    run(conn, SLEEP, {"seconds": 0.01})


async def test_hops_cancelled_at_any_point_leave_nothing_half_done_and_log_no_errors(
    pg_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Cancelled mid-statement, inside or outside its transaction: each hop's entry is
    written whole or not at all, and the pool goes on."""
    written = 0

    async def write_again_and_again() -> None:
        nonlocal written
        while True:
            seq = written + 1
            await pg_store.backend.write(lambda c, n=seq: write_and_wait(c, n))
            written = seq

    with caplog.at_level(logging.WARNING):
        for n in range(40):
            running = asyncio.ensure_future(write_again_and_again())
            await asyncio.sleep(0.001 + (n % 20) * 0.002)
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
            # A hop cancelled after its COMMIT was sent may have committed: count it.
            stored = await entries(pg_store)
            written = len(stored)
            assert [seq for seq, _ in stored] == list(range(1, written + 1))
        gc.collect()
        await asyncio.sleep(0.1)

    assert written > 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_kept_connection_idle_too_long_is_pinged_and_replaced_if_the_server_cut_it(
    pg_store: Store, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend_module, "PING_AFTER_IDLE_S", 0.2)
    pid = await pg_store.backend.read(lambda c: run(c, BACKEND_PID, {}).scalar())
    await terminate(postgres_url, pid)
    await asyncio.sleep(0.3)

    # Unlike a hop straight after the cut (above), this one finds out before it sends.
    await pg_store.backend.write(lambda c: run(c, INSERT_ENTRY, entry(1, "after the cut")))
    assert await entries(pg_store) == [(1, "after the cut")]
    assert await pg_store.backend.read(lambda c: run(c, BACKEND_PID, {}).scalar()) != pid


async def test_hops_keep_at_most_their_share_of_the_pool_and_close_gives_it_back(
    postgres_url: str,
) -> None:
    url, db_schema = normalize_database_url(postgres_url), f"t{uuid.uuid4().hex[:12]}"
    store = await Store.open(url, upgrade=True, db_schema=db_schema, pool_size=4)
    pool = store.backend.engine.sync_engine.pool
    try:
        await asyncio.gather(
            *(store.backend.read(lambda c: run(c, SLEEP, {"seconds": 0.05})) for _ in range(8))
        )
        assert pool.checkedout() == 2  # half the pool kept; the rest went back
        async with store.backend.snapshot() as conn:  # the pool still serves everyone else
            assert (
                await conn.execute(select(func.count()).select_from(schema.entry))
            ).scalar() == 0
    finally:
        await store.close()
        await drop_schema(url, db_schema)
    assert pool.checkedout() == 0
