"""The MCP bank example: its server's dedupe, and the example run as its docstring says (a
Hands serving the bank from the example's own ``mcp.json``, a Brain running ``teller``)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from mcp import Client
from mcp_types import RequestParamsMeta

import brainhands.examples.mcp_bank
from brainhands.examples.mcp_bank.server import build, open_ledger
from brainhands.hands.mcp.connection import OPERATION_ID_KEY
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.submitting import submit_input

pytestmark = pytest.mark.timeout(60)

CONFIG = Path(brainhands.examples.mcp_bank.__file__).with_name("mcp.json")


def deposits(ledger: Path) -> list[tuple[Any, ...]]:
    """Every deposit of the bank's ledger: operation id, account, amount."""
    with contextlib.closing(open_ledger(str(ledger))) as db:
        return list(db.execute("select operation_id, account, amount from deposits order by id"))


async def test_the_bank_makes_a_deposit_once_per_operation_id(tmp_path: Path) -> None:
    ledger = tmp_path / "bank.db"

    async def deposit(client: Client, operation_id: str, account: str = "ann") -> Any:
        meta = cast(RequestParamsMeta, {OPERATION_ID_KEY: operation_id})
        return await client.call_tool("deposit", {"account": account, "amount": 5}, meta=meta)

    async with Client(build(str(ledger))) as client:
        first = await deposit(client, "op-1")
        again = await deposit(client, "op-1")  # the same call, sent again
        other = await deposit(client, "op-2")
        found = await client.call_tool("find_deposit", {"operation_id": "op-1"})
        missing = await client.call_tool("find_deposit", {"operation_id": "op-3"})
        await client.call_tool("close_account", {"account": "bo"})
        refused = await deposit(client, "op-4", account="bo")

    assert again.structured_content == first.structured_content
    assert other.structured_content["deposit"] != first.structured_content["deposit"]
    assert deposits(ledger) == [("op-1", "ann", 5), ("op-2", "ann", 5)]
    assert found.structured_content == {"found": True, "result": first.structured_content}
    assert missing.structured_content == {"found": False}
    assert refused.is_error
    assert "account bo is closed" in refused.content[0].text


@pytest.mark.integration
async def test_the_teller_deposits_once_through_a_hands_and_reads_the_balance(
    brains: BrainHarness, tmp_path: Path
) -> None:
    ledger = tmp_path / "bank.db"
    log = tmp_path / "hands.log"
    # mcp.json starts the server as `python`: this interpreter, as in an activated virtualenv.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    hands = spawn_module(
        "brainhands",
        "hands",
        "--pool",
        "bank",
        env=brains.settings(BRAINHANDS_MCP_CONFIG=str(CONFIG), BANK_LEDGER=str(ledger), PATH=path),
        log=log,
    )
    brains.processes.append(hands)
    brains.start_brain(tasks=None, agents="brainhands.examples.mcp_bank.agent")
    await eventually(lambda: '"event": "consuming"' in log.read_text(), within=30, what="Hands")

    await submit_input(
        brains.store,
        brains.env.topology,
        session_id="s1",
        request_id="r1",
        input={"agent": "teller", "text": "Put 5 in the account of ann."},
        compat="v1",
    )
    answer = await brains.answer(within=30)

    said = "Deposited 5 to ann's account, and read her balance back."
    assert (answer.status, answer.answer) == ("answered", {"text": said, "turns": 3})
    _, (deposit, balance) = await brains.store.queries.history("s1")
    assert (deposit.tool, deposit.status) == ("bank.deposit", "succeeded")
    # Exactly one deposit in the bank's own ledger, under the operation id the Brain gave.
    assert deposits(ledger) == [(deposit.operation_id, "ann", 5)]
    assert (balance.tool, balance.status, balance.result) == (
        "bank.balance",
        "succeeded",
        {"account": "ann", "balance": 5, "closed": False},
    )
    # The policies the example's docstring promises, from the shipped mcp.json.
    declared = {d.name: d for d in await brains.store.declarations.tools()}
    assert {name: (d.policy, d.approval) for name, d in declared.items()} == {
        "bank.balance": ("safe", False),
        "bank.deposit": ("query", False),
        "bank.find_deposit": ("safe", False),
        "bank.close_account": ("unsafe", True),
    }
