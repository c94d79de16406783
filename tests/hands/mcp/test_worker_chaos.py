"""A Hands process serving an MCP server's tools, SIGKILLed after the effect and before
its outcome was recorded; the server's own ledger is the judge."""

from __future__ import annotations

import signal

import pytest

from tests.helpers.harness import HandsHarness
from tests.helpers.mcp_servers import ledger_rows, stdio_entry, write_config
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(120)]

EFFECTS = {"set_limit": "limits", "deposit": "deposits", "close_account": "closures"}


@pytest.mark.parametrize("tool", ["set_limit", "deposit", "close_account"])
async def test_hands_killed_after_the_effect_before_the_outcome(
    bank_hands: HandsHarness, tool: str
) -> None:
    ledger = bank_hands.tmp_path / "ledger.db"
    entry = stdio_entry(ledger, trusted=True, tools={"deposit": {"lookup": "find_deposit"}})
    config = write_config(bank_hands.tmp_path / "mcp.json", {"bank": entry})
    env = {"BRAINHANDS_MCP_CONFIG": str(config)}
    first = bank_hands.start_worker(**env)
    job = bank_hands.job(f"bank.{tool}", {"account": "ann", "amount": 5, "pause_after": 60})
    if tool == "close_account":
        job = bank_hands.job(f"bank.{tool}", {"account": "ann", "pause_after": 60})
    await bank_hands.publish(job)

    effects = EFFECTS[tool]
    await eventually(lambda: bool(ledger_rows(ledger, effects)), within=30, what="the effect")
    first.send_signal(signal.SIGKILL)  # the effect is done; its answer was never received
    first.wait()
    bank_hands.start_worker(**env)  # RabbitMQ redelivers the unacked job to this one

    op = await bank_hands.outcome(job.operation_id, within=60)
    calls = [c for c in ledger_rows(ledger, "calls") if c[0] == tool]
    if tool == "set_limit":
        # safe (idempotent): sent again with the same arguments and operation id.
        assert (op.status, op.attempts) == ("succeeded", 2)
        assert ledger_rows(ledger, "limits") == [("ann", 5)]
        assert calls == [(tool, job.operation_id, None)] * 2
    elif tool == "deposit":
        # query: the lookup found the deposit; it was not made twice.
        assert (op.status, op.attempts) == ("succeeded", 1)
        assert ledger_rows(ledger, "deposits") == [(job.operation_id, "ann", 5)]
        assert op.result == "deposited 5 to ann"
        assert calls == [(tool, job.operation_id, None)]
    else:
        # unsafe (destructive): never sent again, uncertain.
        assert (op.status, op.error["type"]) == ("uncertain", "Interrupted")
        assert ledger_rows(ledger, "closures") == [(job.operation_id, "ann")]
        assert calls == [(tool, job.operation_id, None)]
    assert [r.status for r in bank_hands.results] == [op.status]
