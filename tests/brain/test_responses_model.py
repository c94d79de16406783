"""The Responses adapter against a real loopback HTTP server answering as OpenAI's Responses
API does: the mapping of a conversation, the reading of an answer and its replay, a stored
answer rebuilt, the cut-off and error contract, streaming, and background responses begun
by one adapter and attached to by another. The server's count of generations is the judge
of what was paid."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from brainhands.brain.models import (
    BackgroundModel,
    BackgroundResponsesModel,
    KeyedModel,
    ModelSettings,
    OpenAIChatModel,
    ResponsesModel,
    model_from_settings,
)
from brainhands.brain.models.base import ModelError, TokenCount, TransientModelError
from brainhands.brain.models.responses import to_responses_request
from tests.helpers.model_server import ModelServer, function_call, reasoning, said

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
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
CONVERSATION = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"result": "sunny"}'},
]


@pytest.fixture
def responses() -> Iterator[ModelServer]:
    server = ModelServer()
    yield server
    server.close()


async def test_a_conversation_is_sent_as_responses_input(
    responses: ModelServer, new_model: Callable[..., Any]
) -> None:
    extra = {"reasoning": {"effort": "low"}}
    options = {"api_key": "sk-test", "max_tokens": 64, "temperature": 0.0, "extra_body": extra}
    model = new_model(ResponsesModel, base_url=responses.base_url, **options)

    response = await model.complete(CONVERSATION, TOOLS)

    assert response.text == "done" and response.tool_calls == []
    [request] = responses.received
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert "idempotency-key" not in request.headers  # complete() has no request id
    assert request.body == {
        "model": "test-model",
        "instructions": "You answer briefly.",
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": '{"result": "sunny"}'},
        ],
        "tools": [{"type": "function", "name": "get_weather", "description": "Weather in a city",
                   "parameters": TOOLS[0]["function"]["parameters"], "strict": False}],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "max_output_tokens": 64,
        "temperature": 0.0,
        "reasoning": {"effort": "low"},
    }  # fmt: skip


async def test_an_answer_is_read_replayed_verbatim_and_rebuilt_from_its_raw(
    responses: ModelServer, new_model: Callable[..., Any]
) -> None:
    items = [
        reasoning("weather first"),
        said("Looking."),
        function_call("call_9", "get_weather", {"city": "Oslo"}),
    ]
    usage = {"input_tokens": 40, "output_tokens": 9, "total_tokens": 49}
    responses.outcomes.append({"output": items, "usage": usage})
    model = new_model(ResponsesModel, base_url=responses.base_url)

    response = await model.complete(CONVERSATION[:2], TOOLS)

    assert response.text == "Looking."
    [call] = response.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_9", "get_weather", {"city": "Oslo"})
    assert response.tokens == TokenCount(input=40, output=9)
    assert response.cut_off is None
    assert model.parse(json.loads(json.dumps(response.raw))) == response
    # The next request carries the answer's items as they came, then the tool's result.
    result = {"role": "tool", "tool_call_id": "call_9", "content": "cold"}
    sent = to_responses_request([*CONVERSATION[:2], response.as_message(), result], [])
    assert sent["input"][1:] == [
        *items,
        {"type": "function_call_output", "call_id": "call_9", "output": "cold"},
    ]


async def test_an_answer_cut_off_at_max_output_tokens_is_final_and_runs_no_tool(
    responses: ModelServer, new_model: Callable[..., Any]
) -> None:
    half = function_call("call_2", "get_weather", {"city": "Pa"})
    responses.outcomes.append(
        {
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [said("It is"), half],
        }
    )
    model = new_model(ResponsesModel, base_url=responses.base_url, max_tokens=3)

    response = await model.complete(CONVERSATION[:2], TOOLS)

    assert (response.cut_off, response.text, response.tool_calls) == (
        "max_output_tokens",
        "It is",
        [],
    )
    assert half not in response.as_message()["content"]
    assert len(responses.received) == 1  # not retried


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        ({"status": "failed", "error": {"code": "server_error", "message": "boom"}},
         TransientModelError),
        ({"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "slow"}},
         TransientModelError),
        ({"status": "failed", "error": {"code": "invalid_prompt", "message": "no"}}, ModelError),
        ({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}},
         TransientModelError),
        ({"status": "cancelled"}, TransientModelError),
        ({"output": [{"type": "message", "role": "assistant",
                      "content": [{"type": "refusal", "refusal": "I cannot."}]}]}, ModelError),
        ({"output": [function_call("c", "get_weather", {}) | {"arguments": "[1]"}]},
         TransientModelError),
    ],
)  # fmt: skip
async def test_what_an_answer_says_of_its_failure(
    responses: ModelServer, new_model: Callable[..., Any], outcome: dict[str, Any], error: type
) -> None:
    responses.outcomes.append(outcome)
    model = new_model(ResponsesModel, base_url=responses.base_url)
    with pytest.raises(error) as raised:
        await model.complete(CONVERSATION[:2], [])
    assert type(raised.value) is error


@pytest.mark.parametrize(("status", "error"), [(429, TransientModelError), (400, ModelError)])
async def test_http_errors_keep_the_adapters_contract(
    responses: ModelServer, new_model: Callable[..., Any], status: int, error: type
) -> None:
    responses.errors.append((status, {"error": {"message": "said the server"}}))
    model = new_model(ResponsesModel, base_url=responses.base_url)
    with pytest.raises(error, match="said the server") as raised:
        await model.complete(CONVERSATION[:2], [])
    assert type(raised.value) is error
    assert responses.generations == 0


async def test_a_streamed_answer_hands_its_text_on_and_returns_the_whole_response(
    responses: ModelServer, new_model: Callable[..., Any]
) -> None:
    responses.outcomes.append({"output": [said("Sun"), said("ny.")]})
    model = new_model(ResponsesModel, base_url=responses.base_url, stream=True)
    pieces: list[str] = []

    response = await model.complete(CONVERSATION[:2], [], on_text=pieces.append)

    assert pieces == ["Sun", "ny."] and response.text == "Sunny."
    assert responses.received[0].body["stream"] is True
    assert model.parse(response.raw) == response


async def test_a_background_response_is_begun_at_once_and_attached_to_by_another_adapter(
    responses: ModelServer, new_model: Callable[..., Any]
) -> None:
    responses.hold = 0.6
    options = {"base_url": responses.base_url, "poll_interval": 0.05}
    first = new_model(BackgroundResponsesModel, **options)
    assert isinstance(first, BackgroundModel) and isinstance(first, KeyedModel)

    response_id = await first.begin(CONVERSATION[:2], [], request_id="model-t1/0")

    [begun] = responses.received
    assert begun.body["background"] is True and begun.body["store"] is True
    assert begun.headers["idempotency-key"] == "model-t1/0"
    assert responses.made[response_id].now()["status"] == "in_progress"
    # Another process's adapter (the Brain that took over) attaches by the id alone.
    second = new_model(BackgroundResponsesModel, **options)
    texts: list[str] = []
    response = await second.attach(response_id, on_text=texts.append)
    again = await first.attach(response_id)

    assert response.text == "done" and texts == ["done"] and again == response
    assert responses.generations == 1
    assert responses.polls() >= 3  # it waited, looking, while the model generated


async def test_attaching_to_a_response_that_is_gone_or_too_slow_is_transient(
    responses: ModelServer, new_model: Callable[..., Any]
) -> None:
    model = new_model(
        BackgroundResponsesModel, base_url=responses.base_url, poll_interval=0.05, max_wait=0.3
    )
    with pytest.raises(TransientModelError, match="gone"):
        await model.attach("resp_never")
    responses.hold = 30
    response_id = await model.begin(CONVERSATION[:2], [], request_id="model-t2/0")
    with pytest.raises(TransientModelError, match="still running"):
        await model.attach(response_id)
    assert responses.made[response_id].cancelled  # nobody waits for it: it is stopped


async def test_a_keyed_call_carries_its_request_id_as_the_idempotency_key(
    responses: ModelServer, new_model: Callable[..., Any]
) -> None:
    chat = new_model(OpenAIChatModel, base_url=responses.base_url)
    foreground = new_model(ResponsesModel, base_url=responses.base_url)
    for model in (chat, foreground):
        await model.complete_keyed(CONVERSATION[:2], [], request_id="model-t3/1")
    assert [r.path for r in responses.received] == ["/v1/chat/completions", "/v1/responses"]
    assert {r.headers["idempotency-key"] for r in responses.received} == {"model-t3/1"}


@pytest.mark.parametrize(
    ("provider", "background", "adapter"),
    [
        ("openai-responses", "false", ResponsesModel),
        ("openai-responses", "true", BackgroundResponsesModel),
        ("openai", "true", OpenAIChatModel),  # background is the Responses API's alone
    ],
)
def test_the_settings_choose_the_responses_adapter(
    monkeypatch: pytest.MonkeyPatch, provider: str, background: str, adapter: type
) -> None:
    monkeypatch.setenv("BRAINHANDS_MODEL_PROVIDER", provider)
    monkeypatch.setenv("BRAINHANDS_MODEL_BACKGROUND", background)
    monkeypatch.setenv("BRAINHANDS_MODEL_POLL_INTERVAL", "0.25")
    assert type(model_from_settings(ModelSettings())) is adapter
