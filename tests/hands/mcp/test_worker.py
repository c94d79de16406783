"""A Hands process serving MCP servers' tools, one of whose servers cannot start."""

from __future__ import annotations

import pytest

from brainhands.shared.tools import ToolDeclaration
from tests.helpers.harness import HandsHarness
from tests.helpers.mcp_servers import stdio_entry, write_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_a_server_that_cannot_start_fails_its_calls_and_the_others_are_served(
    bank_hands: HandsHarness,
) -> None:
    # An earlier start, when the server was up, declared its tool.
    ping = ToolDeclaration("gone.ping", "bank", "safe", "Ping.", {"type": "object"})
    await bank_hands.store.declarations.declare_tools([ping])
    ledger = bank_hands.tmp_path / "ledger.db"
    gone = {"command": str(bank_hands.tmp_path / "no-such-server"), "start_attempts": 2}
    config = write_config(
        bank_hands.tmp_path / "mcp.json", {"bank": stdio_entry(ledger, trusted=True), "gone": gone}
    )
    worker = bank_hands.start_worker(BRAINHANDS_MCP_CONFIG=str(config))
    lost, served = bank_hands.job("gone.ping", {}), bank_hands.job("bank.balance", {"account": "a"})
    await bank_hands.publish(lost)
    await bank_hands.publish(served)

    failed = await bank_hands.outcome(lost.operation_id, within=60)
    answered = await bank_hands.outcome(served.operation_id, within=60)

    assert (failed.status, failed.error["type"]) == ("failed", "ToolError")
    assert "MCP server 'gone' could not be reached (2 tries)" in failed.error["message"]
    assert (answered.status, answered.result) == ("succeeded", {"account": "a", "balance": 0})
    assert worker.poll() is None  # the Hands is up
    assert '"event": "mcp_unreachable"' in bank_hands.log(worker)
