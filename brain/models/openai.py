"""A model behind the chat-completions HTTP API: OpenAI, vLLM, Ollama, llama.cpp's server.

``parse_chat_completion`` is the one reader of a chat-completions answer; every adapter whose
``raw`` has that shape (the scripted model included) rebuilds its responses with it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from brainhands.brain.models._http import HttpModel
from brainhands.brain.models.base import ModelResponse, ToolCall, TransientModelError

if TYPE_CHECKING:
    pass

__all__ = ["OpenAIChatModel", "parse_chat_completion"]

_CUT_OFF = frozenset({"length", "content_filter"})
"""Finish reasons of an answer that stopped early: acting on half an answer is never safe."""


class OpenAIChatModel(HttpModel):
    """A model served over the chat-completions API.

    One ``httpx.AsyncClient`` is created on first use and reused; close it with ``aclose()``
    (or ``async with``). ``extra_body`` is merged into every request last, so it can add
    provider-specific fields or override the defaults (e.g. ``{"parallel_tool_calls": False}``
    for a server that rejects it).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(base_url.rstrip("/") + "/chat/completions", model, api_key, timeout)
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._extra_body = dict(extra_body or {})

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelResponse:
        """One chat-completions call; see ``ModelAdapter.complete`` for the error contract."""
        return parse_chat_completion(await self.post(self._request_body(messages, tools)))

    def parse(self, raw: dict[str, Any]) -> ModelResponse:
        """Rebuild a response from the JSON the server returned."""
        return parse_chat_completion(raw)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _request_body(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self._model, "messages": messages}
        if tools:
            body.update(tools=tools, tool_choice="auto", parallel_tool_calls=True)
        if self._temperature is not None:
            body["temperature"] = self._temperature
        if self._max_tokens is not None:
            body["max_tokens"] = self._max_tokens
        body.update(self._extra_body)
        return body


def parse_chat_completion(raw: dict[str, Any]) -> ModelResponse:
    """Read a chat-completions answer into a ``ModelResponse`` whose ``raw`` is ``raw`` itself.

    Raises ``TransientModelError`` for an answer that must not drive tools: no choices, cut
    off, malformed, or tool-call arguments that are not a JSON object. Another attempt may
    well produce a usable answer, so each is worth a retry.
    """
    choices = raw.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise TransientModelError("response has no choices")
    choice = choices[0]
    finish_reason = choice.get("finish_reason")
    if finish_reason in _CUT_OFF:
        raise TransientModelError(f"response was cut off (finish_reason {finish_reason!r})")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise TransientModelError("response choice has no message")
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TransientModelError("response tool_calls is not a list")
    usage = raw.get("usage")
    # Replayed as the server said it, so the next request repeats it byte for byte.
    replay: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        replay["tool_calls"] = calls
    return ModelResponse(
        raw=raw,
        # Ollama sends "" beside tool calls where OpenAI sends null: both mean no text.
        text=content if isinstance(content, str) and content else None,
        tool_calls=[_parse_tool_call(call, index) for index, call in enumerate(calls)],
        usage=usage if isinstance(usage, dict) else {},
        message=replay,
    )


def _parse_tool_call(call: Any, index: int) -> ToolCall:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise TransientModelError("tool call has no function name")
    arguments = function.get("arguments")
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        arguments = {}  # llama.cpp and some vLLM parsers send nothing for a tool without inputs
    elif isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise TransientModelError("tool call arguments are not JSON") from exc
    if not isinstance(arguments, dict):
        raise TransientModelError("tool call arguments are not a JSON object")
    call_id = call.get("id")
    # Tool results are matched by id; a server that sends none still gets a stable one.
    if not isinstance(call_id, str) or not call_id:
        call_id = f"call_{index}"
    return ToolCall(id=call_id, name=function["name"], arguments=arguments)
