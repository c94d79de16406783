from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers.harness import HandsHarness, hands_deployment
from tests.helpers.mcp_servers import kill_servers_of
from tests.helpers.stores import StoreTarget


@pytest.fixture
async def bank_hands(
    store_target: StoreTarget, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[HandsHarness]:
    """Hands workers of pool ``bank`` on each store backend, serving only MCP tools (the
    test gives them ``BRAINHANDS_MCP_CONFIG``); the ledger servers they started are killed
    on the way out."""
    try:
        async with hands_deployment(
            store_target, rabbitmq_url, redis_url, namespace, tmp_path, pool="bank", tool_args=()
        ) as harness:
            yield harness
    finally:
        kill_servers_of(tmp_path / "ledger.db")
