from __future__ import annotations

import pytest
from sqlalchemy import inspect

from brainhands.shared.store import Store, migrate
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
