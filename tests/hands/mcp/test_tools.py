"""MCP servers' tools as a Hands serves them, against the tests' real ledger server over
stdio and over streamable HTTP: listed with their schemas and policies, called with the
operation id, their failures mapped onto what the worker decides."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from brainhands.hands.context import ToolContext
from brainhands.hands.mcp import HttpServer, parse_mcp_config
from brainhands.hands.mcp.connection import IDEMPOTENCY_HEADER, idempotency_key
from brainhands.hands.mcp.tools import McpArguments, McpTool, McpTools
from brainhands.shared.errors import ToolError
from brainhands.shared.tools import ToolDeclaration
from tests.helpers.mcp_servers import http_server, ledger_rows, stdio_entry
from tests.helpers.polling import eventually

pytestmark = pytest.mark.timeout(60)

BANK = {"trusted": True, "tools": {"deposit": {"lookup": "find_deposit"}}}


def context(operation_id: str) -> ToolContext:
    return ToolContext(
        operation_id=operation_id, session_id="s1", fence=1, attempt=1, cancel=asyncio.Event()
    )


async def call(tool: McpTool, operation_id: str, **arguments: Any) -> Any:
    return await tool.spec.fn(McpArguments(**arguments), context(operation_id))


@pytest.fixture(params=["stdio", "http"])
async def bank(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[McpTools]:
    """The ledger server's tools, as a Hands of pool ``bank`` serves them."""
    ledger = tmp_path / "ledger.db"
    if request.param == "stdio":
        entry = stdio_entry(ledger, **BANK)
        tools = McpTools(parse_mcp_config({"servers": {"bank": entry}}, environ={}), pool="bank")
        yield tools
        await tools.close()
        return
    with http_server(ledger, tmp_path / "server.log") as (_, url):
        entry = {"url": url, "headers": {"Authorization": "Bearer ${KEY}"}, **BANK}
        config = parse_mcp_config({"servers": {"bank": entry}}, environ={"KEY": "k"})
        tools = McpTools(config, pool="bank")
        await eventually(lambda: _answers(tools), within=20, what="the server to answer")
        yield tools
        await tools.close()


async def _answers(tools: McpTools) -> bool:
    try:
        await tools.connections["bank"].list_tools()
    except ToolError:
        return False
    return True


async def test_tools_are_listed_with_their_schema_and_the_policy_their_annotations_give(
    bank: McpTools,
) -> None:
    served = {t.spec.name: t for t in await bank.tools([])}

    got = {name: (t.spec.policy, t.spec.approval, t.why) for name, t in served.items()}
    assert got == {
        "bank.balance": ("safe", False, "readOnlyHint"),
        "bank.find_deposit": ("safe", False, "readOnlyHint"),
        "bank.set_limit": ("safe", False, "idempotentHint"),
        "bank.deposit": ("query", False, "destructiveHint false, with a lookup tool"),
        "bank.close_account": ("unsafe", True, "destructiveHint"),
        "bank.transfer": ("query", False, "destructiveHint false, followed as a task"),
        "bank.open_branch": ("safe", False, "idempotentHint"),
    }
    deposit = served["bank.deposit"].spec.declaration()
    assert isinstance(deposit, ToolDeclaration)
    assert (deposit.pool, deposit.description) == (
        "bank",
        "Add money to an account (each call adds: this server does not dedupe).",
    )
    assert deposit.args_schema["required"] == ["account", "amount"]
    assert set(deposit.args_schema["properties"]) == {"account", "amount", "pause_after"}


async def test_a_call_carries_the_operation_id_and_a_lookup_finds_it(
    bank: McpTools, tmp_path: Path
) -> None:
    served = {t.spec.name: t for t in await bank.tools([])}
    deposit = served["bank.deposit"]

    assert await call(deposit, "op-1", account="ann", amount=5) == {"result": "deposited 5 to ann"}

    assert deposit.spec.query is not None
    found = await deposit.spec.query(McpArguments(account="ann", amount=5), context("op-1"))
    missing = await deposit.spec.query(McpArguments(account="ann", amount=5), context("op-2"))
    assert (found.happened, found.result, missing.happened) == (True, "deposited 5 to ann", False)
    over_http = isinstance(bank.connections["bank"].server, HttpServer)
    calls = ledger_rows(tmp_path / "ledger.db", "calls")
    header = "op-1" if over_http else None
    assert calls[0] == ("deposit", "op-1", header)
    assert calls[1][:2] == ("find_deposit", "op-1")
    assert ledger_rows(tmp_path / "ledger.db", "deposits") == [("op-1", "ann", 5)]


async def test_an_error_result_is_a_definite_failure(bank: McpTools) -> None:
    served = {t.spec.name: t for t in await bank.tools([])}
    with pytest.raises(ToolError) as caught:
        await call(served["bank.close_account"], "op-3", account="frozen")
    assert not caught.value.retryable
    # Arguments the server refuses are the call's failure too, with the server's reason.
    with pytest.raises(ToolError, match="amount"):
        await call(served["bank.deposit"], "op-4", account="ann")


def test_the_idempotency_key_is_read_from_tools_call_requests_only() -> None:
    call_body = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
        b'"params":{"name":"t","_meta":{"brainhands/operation_id":"op-9"}}}'
    )
    assert idempotency_key(call_body) == "op-9"
    assert (
        idempotency_key(
            b'{"method":"tools/list","params":{"_meta":{"brainhands/operation_id":"x"}}}'
        )
        is None
    )
    assert idempotency_key(b'{"method":"tools/call","params":{"name":"t"}}') is None
    assert idempotency_key(b"not json") is None
    assert IDEMPOTENCY_HEADER == "Idempotency-Key"


async def test_a_server_that_cannot_start_fails_its_calls_with_the_reason(tmp_path: Path) -> None:
    entry = {"command": str(tmp_path / "no-such-server"), "start_attempts": 2, "trusted": True}
    config = parse_mcp_config({"servers": {"gone": entry}}, environ={})
    tools = McpTools(config, pool="p")
    declared = ToolDeclaration("gone.ping", "p", "safe", "Ping.", {"type": "object"})
    try:
        # Unreachable at start-up: its tools as last declared, so calls say why they fail.
        [kept] = await tools.tools([declared])
        assert (kept.spec.name, kept.spec.policy) == ("gone.ping", "safe")
        with pytest.raises(ToolError, match=r"MCP server 'gone' could not be reached \(2 tries\)"):
            await call(kept, "op-5")
    finally:
        await tools.close()


async def test_a_stdio_server_that_died_is_started_again(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    config = parse_mcp_config({"servers": {"bank": stdio_entry(ledger, **BANK)}}, environ={})
    tools = McpTools(config, pool="bank")
    try:
        served = {t.spec.name: t for t in await tools.tools([])}
        slow = call(served["bank.set_limit"], "op-6", account="ann", amount=1, pause_after=30)
        pending = asyncio.ensure_future(slow)
        await eventually(lambda: len(ledger_rows(ledger, "limits")) == 1, what="the effect")
        [pid] = _children_running("mcp_ledger_server")
        os.kill(pid, signal.SIGKILL)
        # The call's effect is unknown: a plain exception, not a ToolError.
        with pytest.raises(Exception) as caught:
            await pending
        assert not isinstance(caught.value, ToolError)

        assert await call(served["bank.balance"], "op-7", account="ann") == {
            "account": "ann",
            "balance": 0,
        }
        assert len(_children_running("mcp_ledger_server")) == 1
    finally:
        await tools.close()
    await eventually(lambda: not _children_running("mcp_ledger_server"), what="the server to stop")


def _children_running(name: str) -> list[int]:
    """This process's children whose command line names ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        state = stat.rpartition(")")[2].split()[0]
        if ppid == os.getpid() and name.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


async def test_an_http_server_killed_mid_call_leaves_the_effect_unknown_then_is_reached_again(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.db"
    with http_server(ledger, tmp_path / "server.log") as (server, url):
        config = parse_mcp_config({"servers": {"bank": {"url": url, **BANK}}}, environ={})
        tools = McpTools(config, pool="bank")
        try:
            await eventually(lambda: _answers(tools), within=20, what="the server to answer")
            served = {t.spec.name: t for t in await tools.tools([])}
            slow = call(served["bank.deposit"], "op-8", account="ann", amount=5, pause_after=30)
            pending = asyncio.ensure_future(slow)
            await eventually(lambda: len(ledger_rows(ledger, "deposits")) == 1, what="the effect")
            server.kill()
            server.wait()
            with pytest.raises(Exception) as caught:
                await pending
            assert not isinstance(caught.value, ToolError)  # unknown: the policy decides

            # Each call tries to reach it again, and fails with the reason while it is down.
            with pytest.raises(ToolError, match="could not be reached"):
                await call(served["bank.balance"], "op-9", account="ann")
            with http_server(ledger, tmp_path / "again.log", port=int(url.split(":")[2][:-4])):
                await eventually(lambda: _answers(tools), within=20, what="the server again")
                answer = await call(served["bank.balance"], "op-9", account="ann")
            assert answer == {"account": "ann", "balance": 5}
        finally:
            await tools.close()
