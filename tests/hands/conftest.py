from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brainhands.shared.config import normalize_database_url
from tests.helpers.harness import HandsHarness, hands_deployment
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
    no sweeper to re-dispatch a job parked by many kills); parametrized indirectly, the
    fixture's parameter is the queue type (quorum by default)."""
    target = StoreTarget(normalize_database_url(postgres_url), namespace)
    marker = request.node.get_closest_marker("delivery_limit")
    limit = marker.args[0] if marker else 5
    try:
        async with hands_deployment(
            target,
            rabbitmq_url,
            redis_url,
            namespace,
            tmp_path,
            delivery_limit=limit,
            queue_type=getattr(request, "param", "quorum"),
        ) as harness:
            yield harness
    finally:
        await drop_schema(target.url, namespace)
