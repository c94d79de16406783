"""Erasure in the store, on both backends: every row that names the session goes, with its
calls' blobs, and nothing of another session; a session with work open is refused unless
cancelled; the erasure is recorded (who, when, how many rows) without the content; the
sessions past their retention are found by tenant."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import JSON, Boolean, Float, Integer, LargeBinary, String, Table, func, select
from sqlalchemy.sql.sqltypes import BigInteger, Text

from brainhands.shared.errors import NotFoundError, SessionRunning
from brainhands.shared.store import Store, schema

pytestmark = pytest.mark.integration


def a_row(table: Table, session_id: str, n: int) -> dict[str, Any]:
    """A row of ``table`` for ``session_id``: every column without a default given a value
    of its type, the keys made unique by ``n``."""
    row: dict[str, Any] = {}
    for column in table.columns:
        if column.name == "session_id":
            row[column.name] = session_id
        elif (
            column.autoincrement is True
            or (
                column.primary_key
                and isinstance(column.type, Integer)
                and len(table.primary_key) == 1
            )
            or column.server_default is not None
            or (column.nullable and not column.primary_key)
        ):
            continue
        elif isinstance(column.type, (Integer, BigInteger)):
            row[column.name] = n
        elif isinstance(column.type, Float):
            row[column.name] = time.time()
        elif isinstance(column.type, Boolean):
            row[column.name] = False
        elif isinstance(column.type, JSON):
            row[column.name] = {"n": n}
        elif isinstance(column.type, LargeBinary):
            row[column.name] = b"bytes"
        elif isinstance(column.type, (String, Text)):
            row[column.name] = f"{column.name}-{session_id}-{n}"[: column.type.length or 64]
        else:
            raise AssertionError(f"no value for {table.name}.{column.name}")
    if table is schema.task:
        row["status"] = "terminal"
    if table is schema.submission:
        row["status"] = "answered"
    return row


NAMING_A_SESSION = [
    t for t in schema.metadata.sorted_tables if "session_id" in t.c and t is not schema.erasure
]


async def count(store: Store, table: Table, session_id: str) -> int:
    query = select(func.count()).select_from(table).where(table.c.session_id == session_id)
    async with store.backend.engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def fill(store: Store, session_id: str) -> list[str]:
    """The session, a row of every table that names a session, and two blobs its call
    refers to; the blobs' ids."""
    await store.create_session(session_id, compat="v1")
    blobs = [f"blob-{session_id}-{n}" for n in (1, 2)]
    async with store.backend.transaction() as conn:
        for table in NAMING_A_SESSION:
            row = a_row(table, session_id, 1)
            if table is schema.operation:
                row |= {"blob_id": blobs[0], "arguments_blob_id": blobs[1]}
            await conn.execute(table.insert().values(**row))
        for blob in blobs:
            await conn.execute(
                schema.blob.insert().values(id=blob, data=b"large", created_at=time.time())
            )
    return blobs


async def test_an_erasure_takes_every_row_of_the_session_and_nothing_of_another(
    store: Store,
) -> None:
    mine = await fill(store, "acme/s1")
    theirs = await fill(store, "acme/s2")
    assert all([await count(store, t, "acme/s1") for t in NAMING_A_SESSION])

    sent = a_row(schema.outbox, "acme/s1", 2) | {"sent_at": time.time() - 60}
    async with store.backend.transaction() as conn:
        await conn.execute(schema.outbox.insert().values(**sent))

    erased = await store.erasures.erase("acme/s1", principal="key:k1")

    # What it has sent already is the relays' to prune, an hour after it went.
    assert await count(store, schema.outbox, "acme/s1") == 1
    assert await store.outbox.prune(older_than=30) == 1
    for table in NAMING_A_SESSION:
        assert await count(store, table, "acme/s1") == 0, table.name
        assert await count(store, table, "acme/s2") == 1, table.name
    async with store.backend.engine.connect() as conn:
        left = {r.id for r in await conn.execute(select(schema.blob.c.id))}
    assert left == set(theirs) and not left & set(mine)
    assert erased.rows["blob"] == 2 and erased.rows["session"] == 1
    assert all(erased.rows[t.name] == 1 for t in NAMING_A_SESSION)
    with pytest.raises(NotFoundError):
        await store.load("acme/s1")
    # Recorded: who and when, how many rows; what to delete from Redis; no content.
    [record] = await store.erasures.records("acme/s1")
    assert (record["principal"], record["reason"], record["tenant"]) == ("key:k1", "erased", "acme")
    assert record["rows"] == erased.rows
    operation_id = a_row(schema.operation, "acme/s1", 1)["operation_id"]
    assert record["resources"] == ["session:acme/s1", f"operation:{operation_id}"]
    assert await store.erasures.pending_resources(limit=10) == {record["id"]: record["resources"]}
    await store.erasures.resources_deleted([record["id"]])
    assert await store.erasures.pending_resources(limit=10) == {}
    with pytest.raises(NotFoundError):
        await store.erasures.erase("acme/s1", principal="key:k1")


async def test_a_session_with_work_open_is_erased_only_when_cancelled_too(store: Store) -> None:
    await fill(store, "acme/s1")
    async with store.backend.transaction() as conn:
        await conn.execute(schema.task.update().values(status="waiting"))

    with pytest.raises(SessionRunning, match="has work open"):
        await store.erasures.erase("acme/s1", principal="operator")
    assert await count(store, schema.entry, "acme/s1") == 1  # nothing went

    erased = await store.erasures.erase("acme/s1", principal="operator", cancel=True)
    assert erased.rows["task"] == 1 and await count(store, schema.task, "acme/s1") == 0


async def test_sessions_past_their_retention_are_found_by_their_tenants_days(store: Store) -> None:
    day = 86400
    ages = {"acme/old": 10, "acme/new": 1, "globex/old": 10, "keep/old": 400, "old": 10}
    for session_id, days in ages.items():
        await store.create_session(session_id, compat="v1")
        async with store.backend.transaction() as conn:
            await conn.execute(
                schema.session.update()
                .where(schema.session.c.id == session_id)
                .values(updated_at=time.time() - days * day)
            )
    open_task = a_row(schema.task, "globex/old", 1) | {"status": "running"}
    async with store.backend.transaction() as conn:
        await conn.execute(schema.task.insert().values(**open_task))
    expired = store.erasures.expired

    # 7 days for all: the old ones but the one with a task still running.
    assert set(await expired(7, {}, limit=10)) == {"acme/old", "keep/old", "old"}
    # acme keeps 30 days, keep for ever; the default tenant (no '/') goes by the default.
    assert set(await expired(7, {"acme": 30, "keep": 0}, limit=10)) == {"old"}
    assert set(await expired(0, {"acme": 5}, limit=10)) == {"acme/old"}
    assert await expired(0, {}, limit=10) == []
    assert len(await expired(7, {}, limit=2)) == 2  # oldest first, a batch at a time
    assert (await expired(7, {}, limit=1)) == ["keep/old"]
