"""MCP servers that die mid-call, answers lost after the effect, and calls made as tasks of
the Tasks extension followed across a Hands' death: real Hands processes, the tests' ledger
server over stdio and over streamable HTTP, the server's own ledger the judge."""

from __future__ import annotations

import contextlib
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from brainhands.shared.messages import CancelNotice, ToolJob
from tests.helpers.dropping_proxy import DroppingProxy
from tests.helpers.harness import HandsHarness
from tests.helpers.mcp_servers import (
    free_port,
    http_server,
    kill_servers_of,
    ledger_rows,
    stdio_entry,
    write_config,
)
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(150)]

TRUSTED = {"trusted": True, "start_attempts": 10, "tools": {"deposit": {"lookup": "find_deposit"}}}


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


def start_hands(harness: HandsHarness, entry: dict[str, Any]) -> Any:
    config = write_config(harness.tmp_path / "mcp.json", {"bank": entry})
    return harness.start_worker(BRAINHANDS_MCP_CONFIG=str(config))


def calls_of(ledger: Path, tool: str) -> list[tuple[Any, ...]]:
    return [c for c in ledger_rows(ledger, "calls") if c[0] == tool]


async def handle_noted(harness: HandsHarness, job: ToolJob) -> str:
    """The handle the call committed once it holds a task id."""
    noted: list[str] = []

    async def task_id() -> bool:
        with contextlib.suppress(Exception):  # no row yet
            handle = await harness.ledger.handle(job.operation_id)
            if handle is not None and handle.startswith("task:"):
                noted.append(handle)
        return bool(noted)

    await eventually(task_id, within=30, what="the task id committed")
    return noted[0]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_server_killed_mid_call(bank_hands: HandsHarness, transport: str) -> None:
    """Four calls in flight when the server is SIGKILLed (three after their effect, their
    answers held back; one a task still working) and the server started again: the safe one
    is sent again, the query one found by its lookup, the unsafe one uncertain, and the
    task followed to its end by its id on the new server -- no effect made twice."""
    ledger = bank_hands.tmp_path / "ledger.db"
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    entry = stdio_entry(ledger, **TRUSTED) if transport == "stdio" else {"url": url, **TRUSTED}
    held = {"account": "ann", "pause_after": 60}  # answered only after the kill
    jobs = {
        "set_limit": bank_hands.job("bank.set_limit", {**held, "amount": 5}),
        "deposit": bank_hands.job("bank.deposit", {**held, "amount": 5}),
        "close_account": bank_hands.job("bank.close_account", held),
        "transfer": bank_hands.job(
            "bank.transfer", {"account": "bob", "amount": 7, "work_seconds": 4}
        ),
    }
    with contextlib.ExitStack() as servers:
        if transport == "http":
            server, _ = servers.enter_context(
                http_server(ledger, bank_hands.tmp_path / "s1.log", port=port)
            )
            await eventually(lambda: listening(port), within=30, what="the server to listen")
        start_hands(bank_hands, entry)
        for job in jobs.values():
            await bank_hands.publish(job)

        def effects_made() -> bool:
            tables = ("limits", "deposits", "closures", "tasks")
            return all(ledger_rows(ledger, table) for table in tables)

        await eventually(effects_made, within=45, what="three effects and a task")
        await handle_noted(bank_hands, jobs["transfer"])
        assert ledger_rows(ledger, "transfers") == []  # the task works yet
        if transport == "http":
            server.send_signal(signal.SIGKILL)
            server.wait()
            servers.enter_context(http_server(ledger, bank_hands.tmp_path / "s2.log", port=port))
        else:
            kill_servers_of(ledger)  # the Hands starts it again when it next needs it

        ops = {
            tool: await bank_hands.outcome(job.operation_id, within=60)
            for tool, job in jobs.items()
        }

    assert (ops["set_limit"].status, ops["set_limit"].attempts) == ("succeeded", 2)
    assert ledger_rows(ledger, "limits") == [("ann", 5)]
    assert len(calls_of(ledger, "set_limit")) == 2  # safe: sent again, same arguments

    assert ops["deposit"].status == "succeeded"
    assert ops["deposit"].result == "deposited 5 to ann"  # found by the lookup
    assert len(ledger_rows(ledger, "deposits")) == 1 and len(calls_of(ledger, "deposit")) == 1

    assert ops["close_account"].status == "uncertain"
    assert len(ledger_rows(ledger, "closures")) == 1 and len(calls_of(ledger, "close_account")) == 1

    assert (ops["transfer"].status, ops["transfer"].result) == ("succeeded", "transferred 7 to bob")
    [transfer] = ledger_rows(ledger, "transfers")
    assert transfer[1:] == (jobs["transfer"].operation_id, "bob", 7)
    assert len(calls_of(ledger, "transfer")) == 1  # followed by its task id, never re-sent


async def test_a_task_is_followed_by_the_next_hands_after_a_kill(bank_hands: HandsHarness) -> None:
    ledger = bank_hands.tmp_path / "ledger.db"
    port = free_port()
    entry = {"url": f"http://127.0.0.1:{port}/mcp", **TRUSTED}
    with http_server(ledger, bank_hands.tmp_path / "server.log", port=port):
        await eventually(lambda: listening(port), within=30, what="the server to listen")
        first = start_hands(bank_hands, entry)
        job = bank_hands.job("bank.transfer", {"account": "bob", "amount": 7, "work_seconds": 3})
        await bank_hands.publish(job)
        handle = await handle_noted(bank_hands, job)
        first.send_signal(signal.SIGKILL)  # while the task works on the server
        first.wait()
        second = start_hands(bank_hands, entry)
        op = await bank_hands.outcome(job.operation_id, within=60)

    assert (op.status, op.result) == ("succeeded", "transferred 7 to bob")
    [(task_id, status, *_)] = [(r[0], r[5]) for r in ledger_rows(ledger, "tasks")]
    assert (handle, status) == (f"task:{task_id}", "completed")
    assert len(ledger_rows(ledger, "transfers")) == 1
    assert len(calls_of(ledger, "transfer")) == 1  # the second Hands asked, never called
    assert '"event": "queried"' in bank_hands.log(second)


async def test_a_cancel_of_the_call_becomes_tasks_cancel(bank_hands: HandsHarness) -> None:
    ledger = bank_hands.tmp_path / "ledger.db"
    start_hands(bank_hands, stdio_entry(ledger, **TRUSTED))
    job = bank_hands.job("bank.transfer", {"account": "bob", "amount": 7, "work_seconds": 60})
    await bank_hands.publish(job)
    await handle_noted(bank_hands, job)
    notice = CancelNotice(operation_id=job.operation_id, session_id="s1", reason="user cancelled")
    await bank_hands.env.broker.publish(notice, bank_hands.env.topology.cancel_key)

    op = await bank_hands.outcome(job.operation_id, within=30)

    assert op.status == "failed" and "ended cancelled" in op.error["message"]
    assert [r[5] for r in ledger_rows(ledger, "tasks")] == ["cancelled"]
    assert ledger_rows(ledger, "transfers") == []  # the server stopped it before its effect


async def test_answers_dropped_after_the_effect(bank_hands: HandsHarness) -> None:
    """Each call's answer lost on its way back (the server up, its connection cut after
    the effect): the safe call is sent again, the query one found by its lookup, the unsafe
    one uncertain; a task whose id never came back cannot be followed -- uncertain, though
    the server runs it: its effect happens once."""
    ledger = bank_hands.tmp_path / "ledger.db"
    port = free_port()
    markers = [b"limit of ann", b"deposited 5 to ann", b"closed ann", b'"resultType":"task"']
    proxy = DroppingProxy(port, markers)
    with http_server(ledger, bank_hands.tmp_path / "server.log", port=port):
        await eventually(lambda: listening(port), within=30, what="the server to listen")
        async with proxy.running():
            start_hands(bank_hands, {"url": f"http://127.0.0.1:{proxy.port}/mcp", **TRUSTED})
            ops = {}
            for tool, args in [
                ("set_limit", {"account": "ann", "amount": 5}),
                ("deposit", {"account": "ann", "amount": 5}),
                ("close_account", {"account": "ann"}),
                ("transfer", {"account": "bob", "amount": 7, "work_seconds": 1}),
            ]:
                job = bank_hands.job(f"bank.{tool}", args)
                await bank_hands.publish(job)
                ops[tool] = await bank_hands.outcome(job.operation_id, within=60)
            await eventually(
                lambda: bool(ledger_rows(ledger, "transfers")), within=30, what="the transfer"
            )

    assert proxy.dropped == markers  # every answer was lost once
    assert (ops["set_limit"].status, ops["set_limit"].attempts) == ("succeeded", 2)
    assert len(calls_of(ledger, "set_limit")) == 2 and ledger_rows(ledger, "limits") == [("ann", 5)]
    assert (ops["deposit"].status, ops["deposit"].result) == ("succeeded", "deposited 5 to ann")
    assert len(calls_of(ledger, "deposit")) == 1 and len(ledger_rows(ledger, "deposits")) == 1
    assert ops["close_account"].status == "uncertain"
    assert len(calls_of(ledger, "close_account")) == 1
    assert ops["transfer"].status == "uncertain"
    assert "no task id came back" in ops["transfer"].error["message"]
    assert len(calls_of(ledger, "transfer")) == 1 and len(ledger_rows(ledger, "transfers")) == 1
