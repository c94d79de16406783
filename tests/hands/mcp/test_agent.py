"""An agent on a real Brain calls an MCP server's tools through a real Hands process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.brainhands.test_cli import brainhands
from tests.helpers.brains import BrainHarness
from tests.helpers.mcp_servers import ledger_rows, stdio_entry, write_config
from tests.helpers.polling import eventually
from tests.helpers.processes import WORKDIR, spawn_module
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_an_agent_runs_mcp_tools_on_a_hands_pool(
    brains: BrainHarness, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    entry = stdio_entry(ledger, trusted=True, tools={"deposit": {"lookup": "find_deposit"}})
    config = write_config(tmp_path / "mcp.json", {"bank": entry})
    log = tmp_path / "hands.log"
    hands = spawn_module(
        "brainhands",
        "hands",
        "--pool",
        "bank",
        env=brains.settings(BRAINHANDS_MCP_CONFIG=str(config)),
        log=log,
    )
    brains.processes.append(hands)
    model_log = tmp_path / "model.jsonl"
    brains.start_brain(tasks=None, agents="tests.helpers.agents", TEST_MODEL_LOG=str(model_log))
    await eventually(lambda: '"event": "consuming"' in log.read_text(), within=60, what="Hands")

    await submit_input(
        brains.store,
        brains.env.topology,
        session_id="s1",
        request_id="r1",
        input={"agent": "banker", "text": "put 5 in ann's account"},
        compat="v1",
    )
    answer = await brains.answer(within=60)

    said = "Deposited 5; the balance is 5."
    assert (answer.status, answer.answer) == ("answered", {"text": said, "turns": 3})
    # The model is shown names a model API takes (no dot), and calls the tools by them.
    shown = {json.dumps(json.loads(line)["tools"]) for line in model_log.read_text().splitlines()}
    assert shown == {'["bank_deposit", "bank_balance"]'}
    [deposit] = ledger_rows(ledger, "deposits")
    assert deposit[1:] == ("ann", 5)
    # The deposit went out once, under the operation id the Brain gave the call.
    op = await brains.store.ledger.get(deposit[0])
    assert (op.tool, op.status, op.arguments) == (
        "bank.deposit",
        "succeeded",
        {"account": "ann", "amount": 5},
    )
    calls = [c[:2] for c in ledger_rows(ledger, "calls")]
    assert calls == [("deposit", deposit[0]), ("balance", calls[1][1])]
    declared = {d.name: d for d in await brains.store.declarations.tools()}
    assert json.dumps(declared["bank.deposit"].args_schema["required"]) == '["account", "amount"]'

    # The operator sees each MCP tool's policy and why it got it.
    shown = await asyncio.to_thread(brainhands, "tools", cwd=WORKDIR, env=brains.settings())
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    deposit = lines.index(next(line for line in lines if "bank.deposit" in line))
    assert lines[deposit].split()[:2] == ["bank.deposit", "query"]
    assert "query because: destructiveHint false, with a lookup tool" in lines[deposit + 1]
    closing = next(i for i, line in enumerate(lines) if "bank.close_account" in line)
    assert lines[closing].split()[:3] == ["bank.close_account", "unsafe", "approval"]
    assert "unsafe because: destructiveHint" in lines[closing + 1]
