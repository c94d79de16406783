"""Documents as a baseline and increments, on each backend: each write appends its patch in
the commit that makes it, a read folds the increments after the baseline, and a write past
``COMPACT_AFTER`` of them rewrites the baseline."""

from __future__ import annotations

import json

import jsonpatch
import pytest
from sqlalchemy import delete, select, update

from brainhands.shared.errors import ConflictError
from brainhands.shared.store import COMPACT_AFTER, DocumentRecord, Draft, Store, migrate, schema
from tests.helpers.stores import StoreTarget

pytestmark = pytest.mark.integration

_i = schema.document_increment
_d = schema.document


async def write(
    store: Store, values: list[object], start: DocumentRecord | None = None
) -> list[DocumentRecord]:
    """Commit each of ``values`` as the next value of document ``plan`` of session s1 (a
    commit each, with an entry, as a step's), from ``start``; the records the writer kept."""
    state = await store.load("s1")
    version, read = state.session.version, start
    kept: list[DocumentRecord] = []
    for value in values:
        draft = Draft("s1", version=version, fence=1)
        draft.append_entry("note", {"value": value})
        read = draft.put_document(
            "plan", value, expected_version=read.version if read else None, previous=read
        )
        version = (await store.commit(draft)).version
        kept.append(read)
    return kept


async def increments(store: Store) -> list[tuple[int, object]]:
    async with store.backend.engine.connect() as conn:
        rows = await conn.execute(
            select(_i.c.version, _i.c.patch).where(_i.c.session_id == "s1").order_by(_i.c.version)
        )
        return [tuple(r) for r in rows]


@pytest.fixture
async def session(store: Store) -> Store:
    """A session on a store that writes increments alone (``document_increments``)."""
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    store.document_increments = True
    return store


async def test_each_write_appends_its_patch_and_a_read_folds_them(session: Store) -> None:
    values: list[object] = [
        {"steps": ["a"], "done": False},
        {"steps": ["a", "b"], "done": False},
        {"steps": ["b"], "done": False, "owner": {"name": "x"}},
        {"steps": ["b", "c"], "done": True, "owner": {"name": "y"}},
    ]
    await write(session, values)

    found = await increments(session)
    assert [v for v, _ in found] == [1, 2, 3, 4]
    # Each increment is the patch from the value before it, in the commit with its entry.
    folded: object = None
    for (_, patch), value in zip(found, values, strict=True):
        folded = jsonpatch.apply_patch(folded, patch)
        assert folded == value
    assert found[1][1] == [{"op": "add", "path": "/steps/1", "value": "b"}]
    state = await session.load("s1")
    assert [e.body["value"] for e in state.entries] == values
    doc = state.documents["plan"]
    assert (doc.version, doc.baseline, doc.body) == (4, 1, values[-1])

    shown = await session.document("s1", "plan", history=2)
    assert shown.document == doc
    assert [(i.version, i.patch) for i in shown.history] == found[2:]


async def test_a_write_that_conflicts_writes_no_increment(session: Store) -> None:
    [first] = await write(session, [{"n": 1}])
    stale = Draft("s1", version=1, fence=1)
    stale.put_document("plan", {"n": 2}, expected_version=0, previous=first)
    with pytest.raises(ConflictError, match="document 'plan' of session s1 is not at version 0"):
        await session.commit(stale)
    assert [v for v, _ in await increments(session)] == [1]


async def test_the_write_past_compact_after_rewrites_the_baseline(session: Store) -> None:
    kept = await write(session, [{"n": n} for n in range(COMPACT_AFTER + 2)])
    # Version 1 created it (its own baseline); versions 2..COMPACT_AFTER+1 are increments on
    # it; the next one is one too many: it rewrites the baseline.
    assert [r.baseline for r in kept[-3:]] == [1, 1, COMPACT_AFTER + 2]
    state = await session.load("s1")
    assert state.documents["plan"].body == {"n": COMPACT_AFTER + 1}
    assert state.documents["plan"].baseline == COMPACT_AFTER + 2

    # The history stays, and a read reads only after the baseline: without the increments
    # before it, the value is the same.
    assert len(await increments(session)) == COMPACT_AFTER + 2
    async with session.backend.engine.begin() as conn:
        await conn.execute(delete(_i).where(_i.c.version <= COMPACT_AFTER + 1))
    await write(session, [{"n": "after"}], start=kept[-1])
    again = (await session.load("s1")).documents["plan"]
    assert (again.version, again.baseline, again.body) == (
        COMPACT_AFTER + 3,
        COMPACT_AFTER + 2,
        {"n": "after"},
    )


async def test_by_default_each_write_keeps_the_whole_value_for_builds_that_read_only_it(
    session: Store,
) -> None:
    session.document_increments = False
    await write(session, [{"n": 1}, {"n": 2}, {"n": 3}])
    async with session.backend.engine.connect() as conn:
        row = (await conn.execute(select(_d.c.version, _d.c.baseline, _d.c.body))).one()
    assert tuple(row) == (3, 3, {"n": 3})  # the whole value, as a build without increments reads
    assert [v for v, _ in await increments(session)] == [1, 2, 3]  # and the history

    # Such a build writes the whole value, moves the version and appends no increment: the
    # next read takes the value it wrote, and the next write rewrites the baseline.
    async with session.backend.engine.begin() as conn:
        await conn.execute(update(_d).values(version=4, body={"n": "old build"}))
    doc = (await session.load("s1")).documents["plan"]
    assert (doc.version, doc.body, doc.baseline) == (4, {"n": "old build"}, None)
    session.document_increments = True
    [after] = await write(session, [{"n": 5}], start=doc)
    assert after.baseline == 5
    assert (await session.load("s1")).documents["plan"].body == {"n": 5}


async def test_a_write_at_another_kind_version_rewrites_the_baseline(session: Store) -> None:
    [_, second] = await write(session, [{"n": 1}, {"n": 2}])
    assert second.baseline == 1
    state = await session.load("s1")
    draft = Draft("s1", version=state.session.version, fence=1)
    draft.put_document("plan", {"m": 2}, expected_version=2, previous=second, kind_version=2)
    await session.commit(draft)
    doc = (await session.load("s1")).documents["plan"]
    assert (doc.version, doc.baseline, doc.kind_version, doc.body) == (3, 3, 2, {"m": 2})


async def test_documents_migrate_up_and_down(store_target: StoreTarget) -> None:
    """A document of 0014 is its own baseline at 0015; downgraded, its row holds its latest
    value again."""
    store = await Store.open(store_target.url, upgrade=False, db_schema=store_target.schema)
    try:
        await migrate.upgrade(store.backend, "0014")
        await store.create_session("s1", compat="v1")
        async with store.backend.engine.begin() as conn:
            await conn.exec_driver_sql(
                "INSERT INTO document (session_id, name, version, body, updated_at) "
                """VALUES ('s1', 'plan', 3, '{"n": 3}', 1)"""
            )
        await migrate.upgrade(store.backend)
        await store.claim_session_fence("s1", 1)
        before = (await store.load("s1")).documents["plan"]
        assert (before.version, before.baseline, before.body) == (3, 3, {"n": 3})
        await write(store, [{"n": 4}, {"n": 5}], start=before)

        await migrate.downgrade(store.backend, "0014")
        async with store.backend.engine.connect() as conn:
            body = (await conn.exec_driver_sql("SELECT body FROM document")).scalar_one()
            tables = await conn.run_sync(
                lambda c: c.dialect.has_table(c, "document_increment", schema=store_target.schema)
            )
        assert (body if isinstance(body, dict) else json.loads(body)) == {"n": 5}
        assert not tables
    finally:
        await store.close()
