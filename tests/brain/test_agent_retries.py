"""Model retries through the agent loop, on the chat-completions adapter and a real HTTP
server: the attempt count lives in the generation task's stored state, so a Brain killed
between attempts neither asks again what was already answered nor starts the count over."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from brainhands.shared.store import TaskRecord
from tests.helpers.brains import BrainHarness
from tests.helpers.chat_server import ChatServer, completion
from tests.helpers.polling import eventually
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    yield chat
    chat.close()


def start_brain(brains: BrainHarness, server: ChatServer) -> None:
    brains.start_brain(tasks=None, agents="tests.helpers.agents", TEST_MODEL_URL=server.base_url)


async def ask(brains: BrainHarness, agent: str) -> None:
    await submit_input(
        brains.store,
        brains.env.topology,
        session_id="s1",
        request_id="r1",
        input={"agent": agent, "text": "hello"},
        compat="v1",
    )


async def generation(brains: BrainHarness) -> TaskRecord | None:
    tasks, _ = await brains.store.queries.history("s1")
    return next((t for t in tasks if t.kind == "agent.generate"), None)


async def kill_while_sleeping(brains: BrainHarness, server: ChatServer, attempt: int) -> TaskRecord:
    """SIGKILL the Brain once the generation task sleeps after its ``attempt``-th failure
    (the attempt is committed, the next request not yet sent); the task as it slept."""

    async def sleeping() -> bool:
        task = await generation(brains)
        return task is not None and task.status == "sleeping" and task.state["attempt"] == attempt

    await eventually(sleeping, within=30, what=f"the sleep after attempt {attempt}")
    [brain] = (p for p in brains.processes if p.poll() is None)
    brain.send_signal(signal.SIGKILL)
    brain.wait()
    assert len(server.received) == attempt
    slept = await generation(brains)
    assert slept is not None and slept.status == "sleeping"
    return slept


async def test_retries_continue_across_a_killed_brain_until_the_answer(
    brains: BrainHarness, server: ChatServer
) -> None:
    server.reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "2"})
    server.reply(500, {"error": {"message": "boom"}})
    server.reply(200, completion({"role": "assistant", "content": "Hello to you."}))
    start_brain(brains, server)
    await ask(brains, "http_retrier")

    slept = await kill_while_sleeping(brains, server, attempt=1)
    assert slept.wake_at is not None  # the server's Retry-After, not the agent's 0.5 s
    assert slept.wake_at - slept.updated_at == pytest.approx(2, abs=0.25)
    start_brain(brains, server)
    record = await brains.answer(within=60)

    assert record.status == "answered"
    assert record.answer == {"text": "Hello to you.", "turns": 1}
    assert len(server.received) == 3
    task = await generation(brains)
    assert task is not None and task.outcome == "succeeded"
    assert task.state["attempt"] == 2  # one before the kill, one after
    assert "HTTP 500: boom" in task.state["last_error"]


async def test_the_attempt_budget_is_not_renewed_by_a_killed_brain(
    brains: BrainHarness, server: ChatServer
) -> None:
    for _ in range(6):  # more than the budget: a count started over would ask again
        server.reply(503, {"error": {"message": "overloaded"}})
    start_brain(brains, server)
    await ask(brains, "http_giving_up")  # model_attempts=3

    await kill_while_sleeping(brains, server, attempt=2)
    start_brain(brains, server)
    record = await brains.answer(within=60)

    assert record.status == "failed"
    assert len(server.received) == 3
    task = await generation(brains)
    assert task is not None and task.outcome == "failed"
    assert task.error["reason"] == "model unavailable"
    assert task.error["attempts"] == 3
    assert "HTTP 503: overloaded" in task.error["error"]
