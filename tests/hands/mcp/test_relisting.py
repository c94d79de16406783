"""A server's changed tool list reaches the Hands' registry (and so its declarations)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from brainhands.hands.context import ToolContext
from brainhands.hands.mcp import parse_mcp_config
from brainhands.hands.mcp.tools import McpArguments, McpTools
from brainhands.shared.store import Store
from brainhands.shared.tools import ToolRegistry
from tests.helpers.mcp_servers import stdio_entry


async def test_a_tool_the_server_adds_is_registered_when_listed_again(
    store: Store, tmp_path: Path
) -> None:
    entry = stdio_entry(tmp_path / "ledger.db", trusted=True)
    tools = McpTools(parse_mcp_config({"servers": {"bank": entry}}, environ={}), pool="bank")
    registry = ToolRegistry()
    try:
        first = await tools.register(registry, store)
        assert len(first) == 7 and "bank.branch_hours" not in registry.tools
        assert await tools.register(registry, store) == []  # nothing changed

        ctx = ToolContext(
            operation_id="op-1", session_id="s1", fence=1, attempt=1, cancel=asyncio.Event()
        )
        assert await registry.get("bank.open_branch").fn(McpArguments(), ctx) == {"result": "open"}
        [added] = await tools.register(registry, store)

        assert (added.name, added.policy, added.pool) == ("bank.branch_hours", "safe", "bank")
        assert registry.get("bank.branch_hours") is added
    finally:
        await tools.close()
