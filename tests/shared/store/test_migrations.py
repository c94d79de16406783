from __future__ import annotations

import json

import pytest
from sqlalchemy import inspect, text

from brainhands.shared.store import Store, migrate
from brainhands.shared.tenancy import DEFAULT_TENANT
from tests.helpers.stores import StoreTarget

pytestmark = pytest.mark.integration

TABLES = {
    "session", "entry", "document", "task", "submission", "outbox", "operation", "blob", "inbox",
    "tool_declaration", "api_key",
}  # fmt: skip


async def table_names(store: Store) -> set[str]:
    async with store.backend.engine.connect() as conn:
        return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))


async def test_upgrade_from_empty_then_downgrade_then_upgrade(store_target: StoreTarget) -> None:
    store = await Store.open(store_target.url, upgrade=False, db_schema=store_target.schema)
    try:
        assert await migrate.current_revision(store.backend) is None
        await migrate.upgrade(store.backend)
        assert await migrate.current_revision(store.backend) == migrate.head_revision()
        assert await table_names(store) >= TABLES

        await migrate.downgrade(store.backend, "base")
        assert await migrate.current_revision(store.backend) is None
        assert not TABLES & await table_names(store)

        await migrate.upgrade(store.backend)
        assert await table_names(store) >= TABLES
        await store.create_session("s1", compat="v1")
        assert (await store.status())["sessions"] == 1
    finally:
        await store.close()


async def test_concurrent_upgrades_are_harmless(store_target: StoreTarget) -> None:
    import asyncio

    stores = [
        await Store.open(store_target.url, upgrade=False, db_schema=store_target.schema)
        for _ in range(3)
    ]
    try:
        await asyncio.gather(*(migrate.upgrade(s.backend) for s in stores))
        assert await migrate.current_revision(stores[0].backend) == migrate.head_revision()
    finally:
        for s in stores:
            await s.close()


async def test_sessions_from_before_tenants_are_carried_to_their_tenants_keys(
    store_target: StoreTarget,
) -> None:
    """At 0010 a session had one id for every tenant: an API key's session (tenant acme)
    and one made without a tenant. Upgraded, the first is ``acme/<id>`` in every table that
    names it (its unsent wake-up's body too), the second is the default tenant's."""
    store = await Store.open(store_target.url, upgrade=False, db_schema=store_target.schema)
    try:
        await migrate.upgrade(store.backend, "0010")
        body = json.dumps({"type": "wake", "session_id": "s1", "compat": "v1"}).encode()
        statements = [
            "INSERT INTO session (id, uid, compat, version, fence, status, entry_count, "
            "created_at, updated_at, tenant) VALUES "
            "('s1', 'a1b2', 'v1', 3, 2, 'active', 1, 1, 2, 'acme'), "
            "('s0', 'c3d4', 'v1', 0, 0, 'active', 0, 1, 1, NULL)",
            "INSERT INTO entry (session_id, seq, kind, body, created_at) "
            "VALUES ('s1', 0, 'user', '{}', 1)",
            "INSERT INTO submission (id, session_id, request_id, status, input, created_at, "
            "updated_at) VALUES ('sub1', 's1', 'r1', 'queued', '{}', 1, 1)",
            "INSERT INTO inbox (session_id, kind, key, created_at) "
            "VALUES ('s1', 'cancel', 'r1', 1)",
            "INSERT INTO operation (operation_id, session_id, tool, pool, arguments, status, "
            "created_at, updated_at) VALUES ('op1', 's1', 't', 'p', '{}', 'intended', 1, 1)",
        ]
        async with store.backend.transaction() as conn:
            for statement in statements:
                await conn.execute(text(statement))
            await conn.execute(
                text(
                    "INSERT INTO outbox (session_id, routing_key, body, created_at) "
                    "VALUES ('s1', 'brain.v1', :body, 1)"
                ),
                {"body": body},
            )
        await migrate.upgrade(store.backend)

        moved = await store.load("acme/s1")
        assert (moved.session.tenant, moved.session.uid, moved.session.version) == (
            "acme", "a1b2", 3,
        )  # fmt: skip
        assert [e.kind for e in moved.entries] == ["user"]
        assert (await store.submissions.get("acme/s1", "r1")).status == "queued"
        assert (await store.load("s0")).session.tenant == DEFAULT_TENANT
        async with store.backend.snapshot() as conn:
            for table in ("operation", "inbox", "outbox"):
                named = await conn.scalar(text(f"SELECT session_id FROM {table}"))
                assert named == "acme/s1", table
            wake = await conn.scalar(text("SELECT body FROM outbox"))
            sessions = (await conn.execute(text("SELECT id FROM session ORDER BY id"))).all()
        assert json.loads(bytes(wake))["session_id"] == "acme/s1"
        assert [r.id for r in sessions] == ["acme/s1", "s0"]  # the old key is gone
    finally:
        await store.close()


async def test_a_delivery_error_kept_before_0018_is_shown_as_a_tenant_is_told_now(
    store_target: StoreTarget,
) -> None:
    """Before 0018 a failed webhook kept the transport's error, which a tenant's view
    showed (what listens where); upgraded, it says only what a tenant is told now."""
    store = await Store.open(store_target.url, upgrade=False, db_schema=store_target.schema)
    try:
        await migrate.upgrade(store.backend, "0016")
        kept = {
            "sub1": "answered 500",
            "sub2": "ConnectError: [Errno 111] Connection refused",
            "sub3": "RemoteProtocolError: illegal status line: bytearray(b'-ERR')",
            "sub4": None,
        }
        async with store.backend.transaction() as conn:
            await conn.execute(
                text(
                    "INSERT INTO session (id, uid, compat, version, fence, status, entry_count, "
                    "created_at, updated_at, tenant) "
                    "VALUES ('acme/s1', 'a1', 'v1', 0, 0, 'active', 0, 1, 1, 'acme')"
                )
            )
            for n, (id_, error) in enumerate(kept.items()):
                await conn.execute(
                    text(
                        "INSERT INTO submission (id, session_id, request_id, status, input, "
                        "created_at, updated_at, callback_url, callback_error) VALUES "
                        "(:id, 'acme/s1', :r, 'answered', '{}', 1, 1, 'http://h/', :error)"
                    ),
                    {"id": id_, "r": f"r{n}", "error": error},
                )
        await migrate.upgrade(store.backend)
        async with store.backend.snapshot() as conn:
            rows = await conn.execute(text("SELECT id, callback_error FROM submission"))
            told = {row.id: row.callback_error for row in rows}
        assert told == {
            "sub1": "delivery failed (HTTP status 500)",
            "sub2": "delivery failed",
            "sub3": "delivery failed",
            "sub4": None,
        }
    finally:
        await store.close()
