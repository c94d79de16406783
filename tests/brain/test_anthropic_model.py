"""The Messages adapter against a real loopback HTTP server answering as Anthropic's API does."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import pytest

from brainhands.brain.models.anthropic import API_VERSION, AnthropicModel
from brainhands.brain.models.base import ModelError, TransientModelError
from tests.helpers.chat_server import (
    ChatServer,
    events_of,
    message,
    redacted_thinking,
    text,
    thinking,
    tool_use,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
SYSTEM = {"role": "system", "content": "You answer briefly."}
USER = {"role": "user", "content": "Weather in Paris and Oslo?"}


@pytest.fixture
def make_model(server: ChatServer, new_model: Callable[..., Any]) -> Callable[..., AnthropicModel]:
    return functools.partial(new_model, AnthropicModel, base_url=server.root_url)


async def test_text_answer_and_request_shape(
    server: ChatServer, make_model: Callable[..., AnthropicModel]
) -> None:
    body = message(text("Sunny"), text(" in Paris."))
    server.reply(200, body)
    model = make_model(api_key="sk-ant-test", max_tokens=256, temperature=0.0)

    response = await model.complete([SYSTEM, USER], [])

    assert model.name == "test-model"
    assert response.text == "Sunny in Paris."
    assert response.tool_calls == []
    assert response.usage == {"input_tokens": 12, "output_tokens": 5}
    assert response.raw == body  # as returned: the Brain stores exactly this
    assert model.parse(json.loads(json.dumps(response.raw))) == response
    [request] = server.received
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == API_VERSION
    assert "authorization" not in request.headers
    assert request.body == {
        "model": "test-model",
        "max_tokens": 256,
        "temperature": 0.0,
        "system": "You answer briefly.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": USER["content"]}]},
        ],
    }


async def test_tool_use_round(
    server: ChatServer, make_model: Callable[..., AnthropicModel]
) -> None:
    server.reply(
        200,
        message(
            text("Let me check."),
            tool_use("toolu_a", "get_weather", {"city": "Paris"}),
            tool_use("toolu_b", "get_weather", {"city": "Oslo"}),
            stop_reason="tool_use",
        ),
    )
    server.reply(200, message(text("Sunny and snowy.")))
    model = make_model()

    first = await model.complete([SYSTEM, USER], TOOLS)

    assert first.text == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("toolu_a", "get_weather", {"city": "Paris"}),
        ("toolu_b", "get_weather", {"city": "Oslo"}),
    ]
    # The conversation the Brain builds replays the answer as a chat-completions message.
    conversation = [
        SYSTEM,
        USER,
        first.as_message(),
        {"role": "tool", "tool_call_id": "toolu_a", "content": '{"status": "succeeded"}'},
        {"role": "tool", "tool_call_id": "toolu_b", "content": '{"status": "failed"}'},
    ]

    second = await model.complete(conversation, TOOLS)

    assert second.text == "Sunny and snowy." and second.tool_calls == []
    requests = [r.body for r in server.received]
    for request in requests:
        assert request["system"] == "You answer briefly."
        assert request["tools"] == [
            {
                "name": "get_weather",
                "description": "Weather in a city",
                "input_schema": TOOLS[0]["function"]["parameters"],
            }
        ]
    assert requests[1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                text("Let me check."),
                tool_use("toolu_a", "get_weather", {"city": "Paris"}),
                tool_use("toolu_b", "get_weather", {"city": "Oslo"}),
            ],
        },
        {  # both results in one user turn, as the API requires
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": result}
                for call_id, result in [
                    ("toolu_a", '{"status": "succeeded"}'),
                    ("toolu_b", '{"status": "failed"}'),
                ]
            ],
        },
    ]


async def test_a_tool_use_without_text_replays_as_tool_use_alone(
    server: ChatServer, make_model: Callable[..., AnthropicModel]
) -> None:
    server.reply(200, message(tool_use("toolu_1", "get_weather", {}), stop_reason="tool_use"))
    server.reply(200, message(text("Done.")))
    model = make_model(base_url=server.base_url)  # a base URL ending in /v1 is accepted

    first = await model.complete([USER], TOOLS)
    result = {"role": "tool", "tool_call_id": "toolu_1", "content": "{}"}
    await model.complete([USER, first.as_message(), result], TOOLS)

    assert first.text is None
    assert [r.path for r in server.received] == ["/v1/messages", "/v1/messages"]
    assert "system" not in server.received[0].body
    assert server.received[1].body["messages"][1] == {
        "role": "assistant",
        "content": [tool_use("toolu_1", "get_weather", {})],
    }


@pytest.mark.parametrize("stop_reason", ["end_turn", "stop_sequence", "tool_use"])
async def test_complete_answers_are_accepted(
    server: ChatServer, make_model: Callable[..., AnthropicModel], stop_reason: str
) -> None:
    server.reply(200, message(text("ok"), stop_reason=stop_reason))
    assert (await make_model().complete([USER], [])).text == "ok"


async def test_an_answer_cut_off_at_max_tokens_is_final_and_its_tool_use_unread(
    server: ChatServer, make_model: Callable[..., AnthropicModel]
) -> None:
    signed = thinking("The user wants weather.", "sig-1")
    unfinished = tool_use("toolu_a", "get_weather", {})
    body = message(signed, text("Once upon a"), unfinished, stop_reason="max_tokens")
    server.reply(200, body)

    response = await make_model().complete([USER], TOOLS)

    assert len(server.received) == 1  # a final answer: nothing to retry
    assert response.cut_off == "max_tokens"
    assert response.text == "Once upon a" and response.tool_calls == []
    assert response.as_message() == {"role": "assistant", "content": [signed, text("Once upon a")]}
    assert response.raw == body


async def test_an_answer_paused_midway_is_transient(
    server: ChatServer, make_model: Callable[..., AnthropicModel]
) -> None:
    server.reply(200, message(text("Searching"), stop_reason="pause_turn"))
    with pytest.raises(TransientModelError, match="cut off"):
        await make_model().complete([USER], [])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_thinking_blocks_come_back_verbatim_in_the_next_request(
    server: ChatServer, make_model: Callable[..., AnthropicModel], stream: bool
) -> None:
    first = message(
        thinking("Two cities: call the tool twice.", "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"),
        redacted_thinking("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"),
        text("Let me check."),
        tool_use("toolu_a", "get_weather", {"city": "Paris"}),
        tool_use("toolu_b", "get_weather", {"city": "Oslo"}),
        stop_reason="tool_use",
    )
    if stream:
        server.stream(events_of(first), done=False)
    else:
        server.reply(200, first)
    server.reply(200, message(text("Sunny and snowy.")))
    thinks = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    model = make_model(max_tokens=8192, extra_body=thinks, stream=stream)

    answer = await model.complete([SYSTEM, USER], TOOLS)
    # As the session's entries hold it: JSON, written and read back.
    stored = json.loads(json.dumps(answer.as_message()))
    results = [
        {"role": "tool", "tool_call_id": "toolu_a", "content": '{"status": "succeeded"}'},
        {"role": "tool", "tool_call_id": "toolu_b", "content": '{"status": "succeeded"}'},
    ]
    await make_model(max_tokens=8192, extra_body=thinks).complete(
        [SYSTEM, USER, stored, *results], TOOLS
    )

    assert answer.raw == first
    assert [(c.id, c.arguments) for c in answer.tool_calls] == [
        ("toolu_a", {"city": "Paris"}),
        ("toolu_b", {"city": "Oslo"}),
    ]
    asked, replayed = (r.body for r in server.received)
    assert asked["thinking"] == replayed["thinking"] == thinks["thinking"]
    assert asked["max_tokens"] == 8192
    assert replayed["messages"][1] == {"role": "assistant", "content": first["content"]}
    assert [b["tool_use_id"] for b in replayed["messages"][2]["content"]] == ["toolu_a", "toolu_b"]


async def test_a_refusal_is_final(
    server: ChatServer, make_model: Callable[..., AnthropicModel]
) -> None:
    server.reply(200, message(stop_reason="refusal"))
    with pytest.raises(ModelError, match="refused") as caught:
        await make_model().complete([USER], [])
    assert not isinstance(caught.value, TransientModelError)


@pytest.mark.parametrize(
    "body",
    [
        {"type": "message", "stop_reason": "end_turn"},
        message({**tool_use("toolu_1", "get_weather", {}), "input": "Paris"}),
        b"not json",
    ],
    ids=["no-content", "input-not-an-object", "not-json"],
)
async def test_unusable_answers_are_transient(
    server: ChatServer, make_model: Callable[..., AnthropicModel], body: Any
) -> None:
    server.reply(200, body)
    with pytest.raises(TransientModelError):
        await make_model().complete([USER], [])


@pytest.mark.parametrize(
    ("status", "kind"), [(429, "rate_limit_error"), (529, "overloaded_error"), (500, "api_error")]
)
async def test_rate_limited_overloaded_and_server_errors_carry_retry_after(
    server: ChatServer, make_model: Callable[..., AnthropicModel], status: int, kind: str
) -> None:
    error = {"type": "error", "error": {"type": kind, "message": f"{kind} now"}}
    server.reply(status, error, headers={"retry-after": "3"})
    with pytest.raises(TransientModelError, match=f"HTTP {status}: {kind} now") as caught:
        await make_model().complete([USER], [])
    assert caught.value.retry_after == 3


async def test_bad_request_carries_the_api_message(
    server: ChatServer, make_model: Callable[..., AnthropicModel]
) -> None:
    error = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }
    server.reply(400, error)
    with pytest.raises(ModelError, match="HTTP 400: max_tokens: Field required") as caught:
        await make_model().complete([USER], [])
    assert not isinstance(caught.value, TransientModelError)


async def test_timeout_is_transient(
    server: ChatServer, make_model: Callable[..., AnthropicModel]
) -> None:
    server.reply(200, message(text("late")), delay=1.0)
    with pytest.raises(TransientModelError, match="timed out"):
        await make_model(timeout=0.2).complete([USER], [])


async def test_a_streamed_answer_is_the_message_sent_whole_and_its_text_comes_in_pieces(
    server: ChatServer, make_model: Callable[..., AnthropicModel]
) -> None:
    whole = message(
        text("Let me check the weather for you."),
        tool_use("toolu_a", "get_weather", {"city": "Paris"}),
        stop_reason="tool_use",
    )
    server.stream(events_of(whole, pieces=4), done=False)  # the API sends no [DONE]
    pieces: list[str] = []

    response = await make_model(stream=True).complete([USER], TOOLS, on_text=pieces.append)

    assert len(pieces) == 4 and "".join(pieces) == "Let me check the weather for you."
    assert response.text == "Let me check the weather for you."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("toolu_a", "get_weather", {"city": "Paris"})
    ]
    assert response.raw == whole  # put back together: stored as if it had come whole
    assert response.usage == {"input_tokens": 12, "output_tokens": 5}
    assert make_model().parse(json.loads(json.dumps(response.raw))) == response
    assert server.received[0].body["stream"] is True


async def test_a_stream_cut_short_or_failing_mid_way_is_an_error_of_the_right_kind(
    server: ChatServer, make_model: Callable[..., AnthropicModel]
) -> None:
    events = events_of(message(text("Half an answer")))
    server.stream(events[:-2], done=False)  # the server went away before message_stop
    overloaded = {"type": "overloaded_error", "message": "Overloaded"}
    server.stream([*events[:3], {"type": "error", "error": overloaded}], done=False)
    invalid = {"type": "invalid_request_error", "message": "prompt is too long"}
    server.stream([*events[:3], {"type": "error", "error": invalid}], done=False)
    malformed = [events[0], {"type": "content_block_delta", "index": 7}, events[-1]]
    server.stream(malformed, done=False)
    model = make_model(stream=True)

    with pytest.raises(TransientModelError, match="ended before the answer did"):
        await model.complete([USER], [])
    with pytest.raises(TransientModelError, match="overloaded_error: Overloaded"):
        await model.complete([USER], [])
    with pytest.raises(ModelError, match="prompt is too long") as refused:
        await model.complete([USER], [])
    assert not isinstance(refused.value, TransientModelError)  # the same request fails again
    with pytest.raises(TransientModelError, match="malformed stream event"):
        await model.complete([USER], [])
