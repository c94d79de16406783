"""An answer cut off at the model's output limit is a final answer, recorded and handed to
the agent's ``on_length`` policy, never asked again: real Brain processes, a real loopback
HTTP server as the model, counting the requests it gets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from brainhands.brain.agent import CONTINUE_PROMPT
from tests.helpers.brains import BrainHarness
from tests.helpers.chat_server import ChatServer, completion

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CUT = {
    "role": "assistant",
    "content": "Once upon a",
    "tool_calls": [  # begun when the limit struck: never run
        {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": '{"te'}}
    ],
}


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    yield chat
    chat.close()


async def tell(brains: BrainHarness, server: ChatServer, agent: str) -> None:
    await brains.declare_tools()
    brains.start_brain(
        tasks=None, agents="tests.brain.cut_off_agents", TEST_MODEL_URL=server.base_url
    )
    async with brains.client() as client:  # as a user submits: a message to an agent
        await client.submit("s1", "Tell me a story.", agent=agent, request_id="r1")


async def test_a_cut_off_answer_fails_the_session_saying_so_after_one_request(
    brains: BrainHarness, server: ChatServer
) -> None:
    server.reply(200, completion(CUT, "length"))
    server.reply(200, completion({"role": "assistant", "content": "asked again"}))
    await tell(brains, server, "cut_short")  # on_length="fail", the default

    record = await brains.answer(within=60)

    assert record.status == "failed"
    assert "answer cut off" in str(record.error) and "'length'" in str(record.error)
    assert len(server.received) == 1
    assert server.received[0].body["max_tokens"] == 4
    tasks, _ = await brains.store.queries.history("s1")
    [generation] = [t for t in tasks if t.kind == "agent.generate"]
    assert generation.outcome == "failed" and generation.error["reason"] == "answer cut off"
    assert not [t for t in tasks if t.kind not in ("agent.session", "agent.generate")]
    state = await brains.store.load("s1")
    assert [e.kind for e in state.entries] == ["user", "model"]
    assert state.entries[1].body["raw"] == completion(CUT, "length")  # recorded as returned


async def test_a_cut_off_answer_is_continued_in_a_turn_of_its_own(
    brains: BrainHarness, server: ChatServer
) -> None:
    server.reply(200, completion(CUT, "length"))
    server.reply(200, completion({"role": "assistant", "content": " time, the end."}))
    await tell(brains, server, "carrying_on")  # on_length="continue"

    record = await brains.answer(within=60)

    assert record.status == "answered"
    assert record.answer == {"text": "Once upon a time, the end.", "turns": 2}
    first, second = server.received
    assert second.body["messages"] == [
        *first.body["messages"],
        {"role": "assistant", "content": "Once upon a"},  # its unfinished call left out
        {"role": "user", "content": CONTINUE_PROMPT},
    ]
    state = await brains.store.load("s1")
    assert [e.kind for e in state.entries] == ["user", "model", "continuation", "model"]
    assert state.entries[2].body == {"text": CONTINUE_PROMPT, "cut_off": "length"}
    tasks, _ = await brains.store.queries.history("s1")
    assert sorted(t.kind for t in tasks) == ["agent.generate", "agent.generate", "agent.session"]
