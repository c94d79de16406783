from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brainhands.shared.config import normalize_database_url
from brainhands.shared.store import Store
from tests.helpers.harness import HandsHarness, start_email_service
from tests.helpers.rabbit import broker_env
from tests.helpers.stores import StoreTarget, drop_schema


@pytest.fixture
async def hands(
    request: pytest.FixtureRequest,
    postgres_url: str,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
) -> AsyncIterator[HandsHarness]:
    """Hands workers on PostgreSQL, with a real email service as the external ledger.

    ``@pytest.mark.delivery_limit(n)`` raises the queue's delivery limit (this harness has
    no sweeper to re-dispatch a job parked by many kills)."""
    target = StoreTarget(normalize_database_url(postgres_url), namespace)
    store = await Store.open(target.url, upgrade=True, db_schema=target.schema)
    service, email_url = await start_email_service(tmp_path)
    marker = request.node.get_closest_marker("delivery_limit")
    limit = marker.args[0] if marker else 5
    async with broker_env(rabbitmq_url, namespace, delivery_limit=limit) as env:
        harness = HandsHarness(store, target, env, email_url, redis_url, tmp_path)
        await harness.start()
        try:
            yield harness
        finally:
            harness.kill_all()
            service.kill()
            service.wait()
            await store.close()
            await drop_schema(target.url, namespace)
