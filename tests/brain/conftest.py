from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shared.config import normalize_database_url
from shared.store import Store
from tests.helpers.brains import BrainHarness
from tests.helpers.rabbit import broker_env
from tests.helpers.stores import StoreTarget, drop_schema


@pytest.fixture
async def brains(
    postgres_url: str, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[BrainHarness]:
    """Brain worker processes on PostgreSQL, started and killed as a test says."""
    target = StoreTarget(normalize_database_url(postgres_url), namespace)
    store = await Store.open(target.url, upgrade=True, db_schema=target.schema)
    async with broker_env(rabbitmq_url, namespace) as env:
        harness = BrainHarness(store, target, env, redis_url, tmp_path)
        await harness.env.brain_queue("v1")
        try:
            yield harness
        finally:
            harness.kill_all()
            await store.close()
            await drop_schema(target.url, namespace)
