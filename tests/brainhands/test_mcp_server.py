"""``brainhands mcp`` as an MCP client reaches it: a real server process over streamable
HTTP, the ``mcp`` SDK's own client, keys of two tenants, and real Brain and Hands
processes running the agents."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

from brainhands.hands.mcp.tasks import CreatedTask, GetTask, TaskParams, Tasks, TaskState
from tests.helpers.agent_run import AgentRun, agent_run
from tests.helpers.api import key_for
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.processes import WORKDIR, spawn_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
__all__ = ["agent_run"]  # the fixture


async def start_mcp(brains: BrainHarness, **extra: str) -> str:
    """``brainhands mcp`` over HTTP on a free port, against the harness's deployment (and
    ``extra`` settings): its endpoint's URL."""
    log = brains.tmp_path / f"mcp{len(brains.processes)}.log"
    env = brains.settings(**extra)
    proc = spawn_module("brainhands", "mcp", "--port", "0", env=env, log=log)
    brains.processes.append(proc)
    port: list[int] = []

    def listening() -> bool:
        for line in log.read_text().splitlines() if log.exists() else []:
            if '"mcp_listening"' in line:
                port.append(json.loads(line)["port"])
                return True
        assert proc.poll() is None, log.read_text()
        return False

    await eventually(listening, within=30, what="the MCP server to listen")
    return f"http://127.0.0.1:{port[0]}/mcp"


@contextlib.asynccontextmanager
async def connected(
    url: str, key: str, *, gives_up: float = 90, tasks: bool = False
) -> AsyncIterator[Client]:
    """The SDK's client, connected with ``key``, waiting ``gives_up`` seconds at most for
    an answer; with ``tasks``, declaring the Tasks extension."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(10.0, read=120)
    )
    transport = streamable_http_client(url, http_client=http)
    extensions = [Tasks()] if tasks else []
    async with (
        http,
        Client(transport, read_timeout_seconds=gives_up, extensions=extensions) as client,
    ):
        yield client


def out(result: CallToolResult) -> Any:
    """What a tool answered (failing with its error if it failed)."""
    assert not result.is_error, result.content
    structured = result.structured_content
    assert structured is not None
    return structured.get("result", structured)


def refusal(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(getattr(c, "text", "") for c in result.content)


async def agents_declared(brains: BrainHarness) -> None:
    async def declared() -> bool:
        return {"errand", "guarded"} <= await brains.store.declarations.agents("v1")

    await eventually(declared, within=30, what="the Brain to declare its agents")


async def test_each_agent_is_a_tool_and_a_run_answers_once_per_request_id(
    agent_run: AgentRun,
) -> None:
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    await agents_declared(brains)
    url = await start_mcp(brains)
    key = await key_for(brains, "acme", "submit", "read")

    async with connected(url, key) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"run_errand", "run_guarded", "list_approvals", "approve", "deny"} <= names
        asked = {"text": "please do the errand", "request_id": "r1"}
        first = out(await client.call_tool("run_errand", asked))
        again = out(await client.call_tool("run_errand", asked))

    assert (first["session_id"], first["status"], first["created"]) == ("r1", "answered", True)
    assert first["answer"]["text"] == "All three emails are out."
    assert (again["answer"], again["created"]) == (first["answer"], False)
    # One run: three emails, and the session is the key's tenant's, submitted as the key.
    assert len((await agent_run.email.ledger())["sends"]) == 3
    record = await brains.store.submissions.get("acme/r1", "r1")
    assert record.principal == f"key:{key.split('_')[1]}"


async def test_guessing_keys_is_slowed_and_a_key_is_held_to_its_rate(
    brains: BrainHarness,
) -> None:
    reader = await key_for(brains, "acme", "read")
    url = await start_mcp(
        brains, BRAINHANDS_MCP_SERVER_BURST="3", BRAINHANDS_MCP_SERVER_RATE="0.05"
    )
    guessed = {"Authorization": "Bearer bh_nope_nope"}
    async with httpx2.AsyncClient() as http:
        statuses = [(await http.post(url, json={}, headers=guessed)).status_code for _ in range(5)]
        assert statuses == [401, 401, 401, 429, 429]  # the address's guesses, then 429
        busy = await http.post(url, json={}, headers=guessed)
        assert busy.status_code == 429 and int(busy.headers["Retry-After"]) >= 1
        assert "over its rate" in busy.json()["detail"]
        # A valid key has a bucket of its own: served (not 401, not 429) until its burst.
        held = {"Authorization": f"Bearer {reader}"}
        served = [(await http.post(url, json={}, headers=held)).status_code for _ in range(4)]
        assert 401 not in served and served[:3].count(429) == 0 and served[3] == 429


async def test_no_key_or_a_key_without_the_scope_is_refused(brains: BrainHarness) -> None:
    await brains.store.declarations.declare_agents(["v1"], ["errand"])
    reader = await key_for(brains, "acme", "read")  # before the server reads the keys
    url = await start_mcp(brains)

    async with httpx2.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer bh_nope_nope"}):
            refused = await http.post(url, json={}, headers=headers)
            assert refused.status_code == 401, refused.text
            assert "an API key is needed" in refused.json()["detail"]
    with pytest.raises(ExceptionGroup) as refused:  # the SDK's client, at its first request
        async with connected(url, "bh_nope_nope"):
            pass
    assert refused.group_contains(MCPError, depth=2)

    async with connected(url, reader) as client:
        run = await client.call_tool("run_errand", {"text": "hi", "session_id": "s1"})
        assert "lacks the 'submit' scope" in refusal(run)
        decided = await client.call_tool("approve", {"session_id": "s1", "approval_id": "a1"})
        assert "lacks the 'approve' scope" in refusal(decided)
        assert out(await client.call_tool("list_approvals", {})) == []
    assert not await brains.store.listings.exists("acme/s1")  # nothing was submitted


async def test_approvals_are_the_tenants_own_and_decided_once_and_a_run_is_collected(
    agent_run: AgentRun,
) -> None:
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    await agents_declared(brains)
    url = await start_mcp(brains)
    acme = await key_for(brains, "acme", "submit", "read", "approve")
    other = await key_for(brains, "other", "submit", "read", "approve")
    run = {"text": "please do the errand", "session_id": "s1", "request_id": "r1"}

    # The client gives up waiting and disconnects mid-run: the run goes on.
    with pytest.raises(ExceptionGroup) as gave_up:
        async with connected(url, acme, gives_up=2) as client:
            await client.call_tool("run_guarded", run)
    assert gave_up.group_contains(MCPError, match="timed out")

    async with connected(url, acme) as client:

        async def two_pending() -> bool:
            listed = out(await client.call_tool("list_approvals", {"session_id": "s1"}))
            return len(listed) == 2

        await eventually(two_pending, within=60, what="two calls waiting for approval")
        pending = sorted(
            out(await client.call_tool("list_approvals", {})), key=lambda a: a["arguments"]["to"]
        )
        assert {p["session_id"] for p in pending} == {"s1"}
        ana, bo = (p["approval_id"] for p in pending)

    # Another tenant sees none of them and reaches none of them.
    async with connected(url, other) as client:
        assert out(await client.call_tool("list_approvals", {})) == []
        assert out(await client.call_tool("list_approvals", {"session_id": "s1"})) == []
        theirs = await client.call_tool("approve", {"session_id": "s1", "approval_id": ana})
        assert "has no approval" in refusal(theirs)

    async with connected(url, acme) as client:
        decide = {"session_id": "s1", "approval_id": ana, "decision_id": "d1"}
        unfit = await client.call_tool("approve", {**decide, "arguments": {"subject": "hi"}})
        assert '"to" is a required property' in refusal(unfit)  # and nothing was recorded:
        approved = out(await client.call_tool("approve", decide))
        twice = out(await client.call_tool("approve", decide))
        denied = out(
            await client.call_tool(
                "deny", {"session_id": "s1", "approval_id": bo, "reason": "not bo"}
            )
        )
        late = await client.call_tool("approve", {"session_id": "s1", "approval_id": bo})
        collected = out(await client.call_tool("run_guarded", run))

    assert (approved["verdict"], approved["new"], approved["by"]) == ("approved", True, "acme")
    assert (twice["decided_at"], twice["new"]) == (approved["decided_at"], False)
    assert denied["verdict"] == "denied"
    assert "already denied" in refusal(late)
    assert (collected["status"], collected["created"]) == ("answered", False)
    assert collected["answer"]["text"] == "Done what I was allowed to."
    ledger = await agent_run.email.ledger()
    assert [s["recipient"] for s in ledger["sends"]] == ["ana@example.com"]


async def test_over_stdio_it_acts_as_the_cli_does(brains: BrainHarness) -> None:
    await brains.store.declarations.declare_agents(["v1"], ["errand"])
    env = brains.settings(
        BRAINHANDS_TENANT="acme", BRAINHANDS_IDENTITY="ann", BRAINHANDS_MCP_SERVER_WAIT="0.5"
    )
    command = [sys.executable, "-m", "brainhands", "mcp", "--transport", "stdio"]
    server = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=WORKDIR)
    async with Client(server) as client:
        # No Brain runs it: the wait runs out, and the run is left queued, the tenant's.
        asked = {"text": "hi", "session_id": "s1", "request_id": "r1"}
        run = out(await client.call_tool("run_errand", asked))
        unknown = await client.call_tool("approve", {"session_id": "s1", "approval_id": "a1"})
    assert (run["status"], run["created"]) == ("queued", True)
    assert (await brains.store.submissions.get("acme/s1", "r1")).principal == "ann"
    assert "session acme/s1 has no approval 'a1'" in refusal(unknown)


async def test_a_run_as_a_task_is_collected_after_the_client_disconnected(
    agent_run: AgentRun,
) -> None:
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    await agents_declared(brains)
    url = await start_mcp(brains)
    key = await key_for(brains, "acme", "submit", "read")
    other = await key_for(brains, "other", "read")
    asked = {"text": "please do the errand", "session_id": "s1", "request_id": "r1"}

    async with connected(url, key, tasks=True) as client:
        await client.list_tools()
        task = await client.session.call_tool("run_errand", asked, allow_claimed=True)
    assert isinstance(task, CreatedTask)
    assert (task.task_id, task.status) == ("s1/r1", "working")

    # A new connection (no extension needed to read a task) collects the answer.
    async with connected(url, key) as client:
        seen: list[TaskState] = []

        async def completed() -> bool:
            get = GetTask(params=TaskParams(task_id=task.task_id))
            seen.append(await client.session.send_request(get, TaskState))
            return seen[-1].status == "completed"

        await eventually(completed, within=60, what="the task to complete")
        with pytest.raises(MCPError, match="no task 'nope/r1'"):
            await client.session.send_request(
                GetTask(params=TaskParams(task_id="nope/r1")), TaskState
            )
    result = CallToolResult.model_validate(seen[-1].result)
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["answer"]["text"] == "All three emails are out."
    assert len((await agent_run.email.ledger())["sends"]) == 3  # one run
    # Another tenant's key reads no task of acme's.
    async with connected(url, other) as client:
        with pytest.raises(MCPError, match="no task 's1/r1'"):
            await client.session.send_request(
                GetTask(params=TaskParams(task_id="s1/r1")), TaskState
            )
