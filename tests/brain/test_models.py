from __future__ import annotations

import functools
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from brainhands.brain.models.anthropic import AnthropicModel
from brainhands.brain.models.base import ModelError, TransientModelError
from brainhands.brain.models.openai import OpenAIChatModel
from brainhands.brain.models.scripted import ScriptedModel
from brainhands.brain.models.settings import ModelSettings, model_from_settings
from brainhands.shared.config import load_settings
from brainhands.shared.errors import ConfigurationError
from tests.helpers.chat_server import ChatServer, chunks_of, completion, message, text

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


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.fixture
def make_model(server: ChatServer, new_model: Callable[..., Any]) -> Callable[..., OpenAIChatModel]:
    return functools.partial(new_model, OpenAIChatModel, base_url=server.base_url)


USER = [{"role": "user", "content": "Hello"}]


async def test_text_answer(server: ChatServer, make_model: Callable[..., OpenAIChatModel]) -> None:
    body = completion({"role": "assistant", "content": "Hi there"})
    server.reply(200, body)
    model = make_model(temperature=0.0, max_tokens=64)

    response = await model.complete(USER, [])

    assert model.name == "test-model"
    assert response.text == "Hi there"
    assert response.tool_calls == []
    assert response.usage == body["usage"]
    assert response.raw == body
    assert model.parse(response.raw) == response
    [request] = server.received
    assert request.path == "/v1/chat/completions"
    assert "authorization" not in request.headers
    assert request.body == {
        "model": "test-model",
        "messages": USER,
        "temperature": 0.0,
        "max_tokens": 64,
    }


async def test_tool_call_round(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            call("call_a", "get_weather", '{"city": "Paris"}'),
            call("call_b", "get_weather", '{"city": "Oslo"}'),
        ],
    }
    server.reply(200, completion(assistant, "tool_calls"))
    server.reply(200, completion({"role": "assistant", "content": "Sunny and snowy."}))
    model = make_model()

    first = await model.complete(USER, TOOLS)

    assert first.text is None
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_a", "get_weather", {"city": "Paris"}),
        ("call_b", "get_weather", {"city": "Oslo"}),
    ]
    assert model.parse(first.raw) == first
    results = [
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "snow"},
    ]
    conversation = [*USER, first.raw["choices"][0]["message"], *results]

    second = await model.complete(conversation, TOOLS)

    assert second.text == "Sunny and snowy."
    assert [r.body["messages"] for r in server.received] == [USER, conversation]
    for request in server.received:
        assert request.body["tools"] == TOOLS
        assert request.body["tool_choice"] == "auto"
        assert request.body["parallel_tool_calls"] is True


async def test_a_streamed_answer_is_the_answer_sent_whole_and_its_text_comes_in_pieces(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    message = {"role": "assistant", "content": "Sunny in Paris, snow in Oslo."}
    server.reply(200, completion(message))
    server.stream(chunks_of(message, pieces=4))
    whole = await make_model().complete(USER, [])
    pieces: list[str] = []

    streamed = await make_model(stream=True).complete(USER, [], on_text=pieces.append)

    assert len(pieces) == 4 and "".join(pieces) == message["content"]
    assert (streamed.text, streamed.tool_calls, streamed.usage) == (
        whole.text,
        whole.tool_calls,
        whole.usage,
    )
    assert streamed.raw["choices"] == whole.raw["choices"]
    assert make_model().parse(streamed.raw) == streamed  # stored, it reads back the same
    assert server.received[1].body["stream"] is True
    assert server.received[1].body["stream_options"] == {"include_usage": True}


async def test_streamed_tool_calls_are_put_back_together(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            call("call_a", "get_weather", '{"city": "Paris"}'),
            call("call_b", "get_weather", '{"city": "Oslo"}'),
        ],
    }
    server.stream(chunks_of(message))
    pieces: list[str] = []

    response = await make_model(stream=True).complete(USER, TOOLS, on_text=pieces.append)

    assert pieces == [] and response.text is None
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_a", "get_weather", {"city": "Paris"}),
        ("call_b", "get_weather", {"city": "Oslo"}),
    ]
    assert response.raw["choices"][0]["finish_reason"] == "tool_calls"


async def test_a_stream_cut_short_is_transient_and_an_error_status_keeps_its_meaning(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    message = {"role": "assistant", "content": "Half an ans"}
    server.stream(chunks_of(message)[:2], done=False)  # the server went away mid-answer
    server.reply(401, {"error": {"message": "bad key"}})
    server.stream([{"choices": [{"index": 0, "delta": "not a delta"}]}])
    model = make_model(stream=True)

    with pytest.raises(TransientModelError, match="ended before"):
        await model.complete(USER, [])
    with pytest.raises(ModelError, match="bad key") as refused:
        await model.complete(USER, [])
    assert not isinstance(refused.value, TransientModelError)
    with pytest.raises(TransientModelError, match="malformed stream chunk"):
        await model.complete(USER, [])


async def test_a_model_that_does_not_stream_hands_its_text_once(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    server.reply(200, completion({"role": "assistant", "content": "All at once."}))
    pieces: list[str] = []

    await make_model().complete(USER, [], on_text=pieces.append)

    assert pieces == ["All at once."]
    assert "stream" not in server.received[0].body


async def test_authorization_header(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    server.reply(200, completion({"role": "assistant", "content": "ok"}))
    await make_model(api_key="sk-test").complete(USER, [])
    assert server.received[0].headers["authorization"] == "Bearer sk-test"


async def test_rate_limited_carries_retry_after(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    server.reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "2"})
    with pytest.raises(TransientModelError, match="slow down") as caught:
        await make_model().complete(USER, [])
    assert caught.value.retry_after == 2


@pytest.mark.parametrize(
    ("status", "body"),
    [(500, {"error": {"message": "boom"}}), (503, b"<html>busy</html>"), (200, b"not json")],
)
async def test_server_failures_are_transient(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel], status: int, body: Any
) -> None:
    server.reply(status, body)
    with pytest.raises(TransientModelError) as caught:
        await make_model().complete(USER, [])
    assert caught.value.retry_after is None


async def test_bad_request_is_not_transient(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    server.reply(400, {"error": {"message": "unknown field 'foo'", "type": "invalid_request"}})
    with pytest.raises(ModelError, match="unknown field 'foo'") as caught:
        await make_model().complete(USER, [])
    assert not isinstance(caught.value, TransientModelError)


@pytest.mark.parametrize(
    "body",
    [
        completion({"role": "assistant", "content": "Once upon a"}, "content_filter"),
        {**completion({"role": "assistant", "content": "x"}), "choices": []},
        completion({"role": "assistant", "tool_calls": [call("c", "get_weather", "{bad")]}),
    ],
    ids=["filtered", "no-choices", "broken-arguments"],
)
async def test_unusable_answers_are_transient(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel], body: dict[str, Any]
) -> None:
    server.reply(200, body)
    with pytest.raises(TransientModelError):
        await make_model().complete(USER, [])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_answer_cut_off_at_its_length_is_final_and_its_calls_unread(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel], stream: bool
) -> None:
    said = {
        "role": "assistant",
        "content": "Once upon a",
        "tool_calls": [call("call_a", "get_weather", '{"city": "Par')],  # unfinished
    }
    body = completion(said, "length")
    if stream:
        server.stream([*chunks_of(said)[:-2], *_finished(chunks_of(said)[-2:], "length")])
    else:
        server.reply(200, body)

    response = await make_model(stream=stream).complete(USER, TOOLS)

    assert len(server.received) == 1  # a final answer: nothing to retry
    assert response.cut_off == "length"
    assert response.text == "Once upon a" and response.tool_calls == []
    assert response.as_message() == {"role": "assistant", "content": "Once upon a"}
    assert response.raw["choices"][0]["message"] == said  # stored as returned
    assert make_model().parse(response.raw) == response


def _finished(chunks: list[dict[str, Any]], reason: str) -> list[dict[str, Any]]:
    """The last chunks of a stream, its finish reason made ``reason``."""
    head, usage = chunks
    [choice] = head["choices"]
    return [{**head, "choices": [{**choice, "finish_reason": reason}]}, usage]


async def test_the_options_reach_the_request_body_and_extra_body_has_the_last_word(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    server.reply(200, completion({"role": "assistant", "content": "ok"}))
    extra = {"top_p": 0.5, "temperature": 0.7, "parallel_tool_calls": None}
    model = make_model(max_tokens=32, temperature=0.2, extra_body=extra)

    await model.complete(USER, TOOLS)

    [request] = server.received
    assert request.body == {
        "model": "test-model",
        "messages": USER,
        "tools": TOOLS,
        "tool_choice": "auto",
        "max_tokens": 32,
        "temperature": 0.7,  # extra_body's
        "top_p": 0.5,
    }


async def test_a_server_that_rejects_parallel_tool_calls_works_when_told_not_to_send_it(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    server.rejected.add("parallel_tool_calls")
    server.reply(200, completion({"role": "assistant", "content": "ok"}))

    with pytest.raises(ModelError, match=r"Unrecognized request argument.*parallel_tool_calls"):
        await make_model().complete(USER, TOOLS)
    told = make_model(extra_body={"parallel_tool_calls": None})
    assert (await told.complete(USER, TOOLS)).text == "ok"

    sent, refused = server.received[1].body, server.received[0].body
    assert "parallel_tool_calls" not in sent and refused["parallel_tool_calls"] is True
    assert sent["tools"] == TOOLS and sent["tool_choice"] == "auto"


async def test_timeout_is_transient(
    server: ChatServer, make_model: Callable[..., OpenAIChatModel]
) -> None:
    server.reply(200, completion({"role": "assistant", "content": "late"}), delay=1.0)
    with pytest.raises(TransientModelError, match="timed out"):
        await make_model(timeout=0.2).complete(USER, [])


async def test_connection_refused_is_transient(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(TransientModelError):
        await make_model(base_url=f"http://127.0.0.1:{port}/v1").complete(USER, [])


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAINHANDS_MODEL_BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("BRAINHANDS_MODEL_NAME", "qwen2.5")
    monkeypatch.setenv("BRAINHANDS_MODEL_API_KEY", "sk-env")
    monkeypatch.setenv("BRAINHANDS_MODEL_TIMEOUT", "5")
    monkeypatch.setenv("BRAINHANDS_MODEL_STREAM", "true")
    settings = ModelSettings()
    assert "sk-env" not in repr(settings)
    assert settings.stream is True
    model = model_from_settings(settings)
    assert isinstance(model, OpenAIChatModel)  # the default provider
    assert model.name == "qwen2.5"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_the_settings_reach_the_request_body(
    monkeypatch: pytest.MonkeyPatch, server: ChatServer, provider: str
) -> None:
    reply = completion if provider == "openai" else lambda _: message(text("ok"))
    server.reply(200, reply({"role": "assistant", "content": "ok"}))
    monkeypatch.setenv("BRAINHANDS_MODEL_PROVIDER", provider)
    monkeypatch.setenv("BRAINHANDS_MODEL_BASE_URL", server.base_url)
    monkeypatch.setenv("BRAINHANDS_MODEL_MAX_TOKENS", "16000")
    monkeypatch.setenv("BRAINHANDS_MODEL_TEMPERATURE", "0.3")
    extra = {"top_k": 5, "metadata": {"user_id": "u1"}}
    monkeypatch.setenv("BRAINHANDS_MODEL_EXTRA_BODY", json.dumps(extra))
    async with model_from_settings(load_settings(ModelSettings)) as model:
        await model.complete(USER, [])

    [request] = server.received
    assert request.body["max_tokens"] == 16000 and request.body["temperature"] == 0.3
    assert request.body["top_k"] == 5 and request.body["metadata"] == {"user_id": "u1"}


async def test_the_messages_api_gets_4096_tokens_unless_told_otherwise(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.reply(200, message(text("ok")))
    monkeypatch.setenv("BRAINHANDS_MODEL_PROVIDER", "anthropic")
    monkeypatch.setenv("BRAINHANDS_MODEL_BASE_URL", server.root_url)
    settings = load_settings(ModelSettings)
    assert settings.max_tokens is None
    async with model_from_settings(settings) as model:
        await model.complete(USER, [])
    assert server.received[0].body["max_tokens"] == 4096
    assert "temperature" not in server.received[0].body


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("MAX_TOKENS", "0", "greater than 0"),
        ("MAX_TOKENS", "lots", "valid integer"),
        ("TEMPERATURE", "-1", "greater than or equal to 0"),
        ("EXTRA_BODY", "{top_k: 5}", "not JSON"),
        ("EXTRA_BODY", "[1, 2]", "must be a JSON object"),
    ],
)
def test_invalid_model_settings_fail_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, said: str
) -> None:
    monkeypatch.setenv(f"BRAINHANDS_MODEL_{variable}", value)
    with pytest.raises(ConfigurationError, match=f"BRAINHANDS_MODEL_{variable}: .*{said}"):
        load_settings(ModelSettings)


def test_the_provider_setting_picks_the_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAINHANDS_MODEL_PROVIDER", "anthropic")
    monkeypatch.setenv("BRAINHANDS_MODEL_NAME", "claude-sonnet-4-5")
    model = model_from_settings(load_settings(ModelSettings))
    assert isinstance(model, AnthropicModel) and model.name == "claude-sonnet-4-5"
    assert not model._stream
    monkeypatch.setenv("BRAINHANDS_MODEL_STREAM", "true")
    streaming = model_from_settings(load_settings(ModelSettings))
    assert isinstance(streaming, AnthropicModel) and streaming._stream


def test_an_unknown_provider_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAINHANDS_MODEL_PROVIDER", "gemini")
    with pytest.raises(ConfigurationError, match=r"BRAINHANDS_MODEL_PROVIDER: .*'anthropic'"):
        load_settings(ModelSettings)


# ScriptedModel


SCRIPT = {
    "turns": [
        {
            "text": "Let me check.",
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "get_weather", "arguments": {"city": "Oslo"}},
            ],
        },
        {"fail": "transient", "text": "Sunny and snowy."},
    ]
}


def write_script(tmp_path: Path, script: dict[str, Any]) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return path


def conversation(assistant_turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [*USER]
    for turn in range(assistant_turns):
        messages.append({"role": "assistant", "content": f"turn {turn}"})
        messages.append({"role": "user", "content": "go on"})
    return messages


async def test_scripted_turn_comes_from_the_messages(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"turns": [{"text": "zero"}, {"text": "one"}]})
    model = ScriptedModel(script)
    assert (await model.complete(conversation(1), [])).text == "one"
    assert (await model.complete(conversation(0), [])).text == "zero"
    assert (await ScriptedModel(script).complete(conversation(1), [])).text == "one"


async def test_scripted_tool_calls(tmp_path: Path) -> None:
    model = ScriptedModel(write_script(tmp_path, SCRIPT), name="demo")

    response = await model.complete(USER, TOOLS)

    assert model.name == "demo"
    assert response.text == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_0_0", "get_weather", {"city": "Paris"}),
        ("call_0_1", "get_weather", {"city": "Oslo"}),
    ]
    choice = response.raw["choices"][0]
    assert response.raw["id"] == "scripted-0"
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert model.parse(json.loads(json.dumps(response.raw))) == response


async def test_scripted_log_lines_are_byte_identical(tmp_path: Path) -> None:
    script = write_script(tmp_path, SCRIPT)
    logs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for log in logs:
        await ScriptedModel(script, log_path=log).complete(USER, TOOLS)
    first, second = (log.read_bytes() for log in logs)
    assert first == second
    assert json.loads(first) == {"turn": 0, "messages": USER, "tools": ["get_weather"]}
    assert first.count(b"\n") == 1


async def test_scripted_exhaustion(tmp_path: Path) -> None:
    ends_in_text = ScriptedModel(write_script(tmp_path, {"turns": [{"text": "done"}]}))
    assert (await ends_in_text.complete(conversation(3), [])).text == "done"

    ends_in_calls = ScriptedModel(
        write_script(tmp_path, {"turns": [{"tool_calls": [{"name": "get_weather"}]}]})
    )
    assert (await ends_in_calls.complete(USER, TOOLS)).tool_calls[0].arguments == {}
    with pytest.raises(ModelError, match="script exhausted"):
        await ends_in_calls.complete(conversation(1), TOOLS)


async def test_scripted_transient_failure_once_across_restarts(tmp_path: Path) -> None:
    script, log = write_script(tmp_path, SCRIPT), tmp_path / "requests.jsonl"
    with pytest.raises(TransientModelError):
        await ScriptedModel(script, log_path=log).complete(conversation(1), [])
    restarted = ScriptedModel(script, log_path=log)
    assert (await restarted.complete(conversation(1), [])).text == "Sunny and snowy."
    assert (await restarted.complete(conversation(1), [])).text == "Sunny and snowy."
    assert len(log.read_text().splitlines()) == 3


async def test_scripted_transient_failure_without_log(tmp_path: Path) -> None:
    model = ScriptedModel(write_script(tmp_path, SCRIPT))
    with pytest.raises(TransientModelError):
        await model.complete(conversation(1), [])
    assert (await model.complete(conversation(1), [])).text == "Sunny and snowy."
