"""A model behind the chat-completions HTTP API: OpenAI, vLLM, Ollama, llama.cpp's server.

``parse_chat_completion`` is the one reader of a chat-completions answer; every adapter whose
``raw`` has that shape (the scripted model included) rebuilds its responses with it.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any

import httpx
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from brainhands.brain.models.base import ModelError, ModelResponse, ToolCall, TransientModelError

__all__ = ["ModelSettings", "OpenAIChatModel", "parse_chat_completion"]

_CUT_OFF = frozenset({"length", "content_filter"})
"""Finish reasons of an answer that stopped early: acting on half an answer is never safe."""


class ModelSettings(BaseSettings):
    """Which model a Brain worker talks to (``BRAINHANDS_MODEL_*`` variables)."""

    model_config = SettingsConfigDict(env_prefix="BRAINHANDS_MODEL_", extra="ignore")

    base_url: str = "http://127.0.0.1:11434/v1"
    """The API root that ``/chat/completions`` hangs off (default: a local Ollama)."""
    name: str = "llama3.1"
    api_key: SecretStr | None = None
    timeout: float = Field(default=60.0, gt=0)
    """Seconds one model call may take before it counts as failed (and retryable)."""


class OpenAIChatModel:
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
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._model = model
        self._api_key = api_key
        self._timeout = timeout
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._extra_body = dict(extra_body or {})
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: ModelSettings) -> OpenAIChatModel:
        """The adapter that ``settings`` describe."""
        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        return cls(settings.base_url, settings.name, api_key, timeout=settings.timeout)

    @property
    def name(self) -> str:
        """The model's name, as sent in each request."""
        return self._model

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelResponse:
        """One chat-completions call; see ``ModelAdapter.complete`` for the error contract."""
        try:
            response = await self._http().post(self._url, json=self._request_body(messages, tools))
        except httpx.UnsupportedProtocol as exc:
            raise ModelError(f"{self._model}: cannot call {self._url}: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise TransientModelError(f"{self._model}: timed out after {self._timeout}s") from exc
        except httpx.TransportError as exc:
            raise TransientModelError(f"{self._model}: {type(exc).__name__}: {exc}") from exc
        _raise_for_status(self._model, response)
        try:
            raw = response.json()
        except ValueError as exc:
            raise TransientModelError(f"{self._model}: response body is not JSON") from exc
        if not isinstance(raw, dict):
            raise TransientModelError(f"{self._model}: response body is not a JSON object")
        return parse_chat_completion(raw)

    def parse(self, raw: dict[str, Any]) -> ModelResponse:
        """Rebuild a response from the JSON the server returned."""
        return parse_chat_completion(raw)

    async def aclose(self) -> None:
        """Close the HTTP connections; the next call opens new ones."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.AsyncClient(headers=headers, timeout=self._timeout)
        return self._client

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
    return ModelResponse(
        raw=raw,
        # Ollama sends "" beside tool calls where OpenAI sends null: both mean no text.
        text=content if isinstance(content, str) and content else None,
        tool_calls=[_parse_tool_call(call, index) for index, call in enumerate(calls)],
        usage=usage if isinstance(usage, dict) else {},
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


def _raise_for_status(model: str, response: httpx.Response) -> None:
    status = response.status_code
    if 200 <= status < 300:
        return
    message = f"{model}: HTTP {status}: {_error_message(response)}"
    if status in (408, 429) or status >= 500:
        retry_after = _retry_after(response.headers.get("Retry-After"))
        raise TransientModelError(message, retry_after=retry_after)
    raise ModelError(message)


def _error_message(response: httpx.Response) -> str:
    """The provider's own words: ``{"error": {"message"}}`` (OpenAI, vLLM, Ollama, llama.cpp),
    ``{"error": "..."}``, ``{"message"}`` or ``{"detail"}``; else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for candidate in (error, body.get("message"), body.get("detail")):
            if isinstance(candidate, str):
                return candidate
    return response.text[:500] or response.reason_phrase


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or an HTTP date)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None
