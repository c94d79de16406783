"""What the adapters over HTTP share: their options and their call (``HttpModel``, each
provider filling in its request, its stream and its reading of the answer), and one JSON
POST to a model's API (answered with JSON, or with a stream of server-sent events) or GET
of what it made, with the error contract every HTTP adapter keeps.

Transport failures, timeouts, 408, 429 and 5xx (Anthropic's 529 "overloaded" included) are
``TransientModelError``, carrying the server's ``Retry-After``; other statuses are
``ModelError`` in the provider's own words; a 2xx body that is not a JSON object is transient.
"""

from __future__ import annotations

import contextlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Self

import httpx

from brainhands.brain.models.base import (
    Json,
    ModelError,
    ModelResponse,
    TextSink,
    TransientModelError,
)


class HttpModel(ABC):
    """What every adapter over an HTTP API shares: its options, one call (``complete``)
    answered whole or streamed, and one ``httpx.AsyncClient``, created on first use with
    the provider's ``headers()`` and reused, closed by ``aclose()`` (or ``async with``).

    ``base_url`` is the API root (the provider's ``endpoint`` hangs off it). ``max_tokens``
    caps the answer's length (None: not sent, the server's own limit, unless the provider
    requires one: ``default_max_tokens``); ``temperature`` is sent when given.
    ``extra_body`` is merged into every request last: it adds provider-specific fields or
    overrides the adapter's, and a field it sets to None is left out of the request (e.g.
    ``{"parallel_tool_calls": None}`` for a server that rejects that field). ``stream``:
    ask for the answer as server-sent events, handing its text to ``on_text`` as it comes;
    the events are put back together into the answer the server would have sent whole,
    which is what is returned and stored.
    """

    default_max_tokens: int | None = None
    """The ``max_tokens`` sent when none is given (for an API that requires one)."""
    max_tokens_field = "max_tokens"
    """The request field that carries ``max_tokens``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        max_tokens: int | None = None,
        temperature: float | None = None,
        extra_body: Json | None = None,
        stream: bool = False,
    ) -> None:
        self._url = self.endpoint(base_url.rstrip("/"))
        self._model = model
        self._api_key = api_key
        self._timeout = timeout
        self._max_tokens = max_tokens if max_tokens is not None else self.default_max_tokens
        self._temperature = temperature
        self._extra_body = dict(extra_body or {})
        self._stream = stream
        self._client: httpx.AsyncClient | None = None

    @property
    def name(self) -> str:
        """The model's name, as sent in each request."""
        return self._model

    @staticmethod
    @abstractmethod
    def endpoint(root: str) -> str:
        """The URL requests are posted to, under the API root ``root``."""

    @abstractmethod
    def request_body(self, messages: list[Json], tools: list[Json]) -> Json:
        """The provider's request for a conversation and tool schemas in chat-completions
        form, before the adapter's options are added."""

    @abstractmethod
    async def read_stream(self, events: AsyncIterator[Json], on_text: TextSink | None) -> Json:
        """The answer a stream of ``events`` adds up to, as the server would send it whole
        (``on_text`` handed its text as it comes)."""

    @abstractmethod
    def parse(self, raw: Json) -> ModelResponse:
        """Rebuild a response from the JSON the server returned."""

    def headers(self) -> dict[str, str]:
        """The provider's headers on every request (its authentication, its version)."""
        return {}

    def body(self, messages: list[Json], tools: list[Json]) -> Json:
        """The whole request body: the provider's request, the adapter's options, then
        ``extra_body`` over them."""
        body = self.request_body(messages, tools)
        if self._max_tokens is not None:
            body[self.max_tokens_field] = self._max_tokens
        if self._temperature is not None:
            body["temperature"] = self._temperature
        return merge_body(body, self._extra_body)

    async def complete(
        self, messages: list[Json], tools: list[Json], *, on_text: TextSink | None = None
    ) -> ModelResponse:
        """One model call; see ``ModelAdapter.complete`` for the error contract. Streamed
        when the adapter was made with ``stream=True``; else ``on_text`` gets the whole text
        once."""
        return await self._call(self.body(messages, tools), {}, on_text)

    async def complete_keyed(
        self,
        messages: list[Json],
        tools: list[Json],
        *,
        request_id: str,
        on_text: TextSink | None = None,
    ) -> ModelResponse:
        """``complete``, sent with the header ``Idempotency-Key: {request_id}``
        (``KeyedModel``)."""
        return await self._call(self.body(messages, tools), idempotency(request_id), on_text)

    async def _call(
        self, body: Json, headers: dict[str, str], on_text: TextSink | None
    ) -> ModelResponse:
        if self._stream:
            events = post_events(self.client(), self._url, body, model=self._model, headers=headers)
            async with contextlib.aclosing(events):  # closed even when read_stream stops early
                return self.parse(await self.read_stream(events, on_text))
        raw = await post_json(self.client(), self._url, body, model=self._model, headers=headers)
        response = self.parse(raw)
        if on_text is not None and response.text:
            on_text(response.text)
        return response

    def client(self) -> httpx.AsyncClient:
        """The adapter's HTTP client (made on first use)."""
        if self._client is None:
            self._client = httpx.AsyncClient(headers=self.headers(), timeout=self._timeout)
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections; the next call opens new ones."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def idempotency(request_id: str) -> dict[str, str]:
    """The header that makes ``request_id`` a call's idempotency key: a provider that honours
    it answers the same key twice with one generation; others ignore it."""
    return {"Idempotency-Key": request_id}


def merge_body(body: Json, extra: Json) -> Json:
    """``body`` with ``extra``'s fields over its own; a field ``extra`` sets to None is left
    out (a server that rejects a field the adapter sends is spared it)."""
    merged = {**body, **extra}
    for name, value in extra.items():
        if value is None:
            del merged[name]
    return merged


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    *,
    model: str,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """POST ``body`` to ``url`` and return the JSON object answered, exactly as returned."""
    with _transport_errors(client, url, model):
        response = await client.post(url, json=body, headers=headers)
    return json_object(model, response)


async def get_json(client: httpx.AsyncClient, url: str, *, model: str) -> dict[str, Any] | None:
    """GET ``url`` and return the JSON object answered, or None when there is no such thing
    (404: gone, or never there); other errors as ``post_json``'s."""
    with _transport_errors(client, url, model):
        response = await client.get(url)
    return None if response.status_code == 404 else json_object(model, response)


def json_object(model: str, response: httpx.Response) -> dict[str, Any]:
    """The JSON object a 2xx ``response`` carries; the error it means otherwise."""
    raise_for_status(model, response)
    try:
        raw = response.json()
    except ValueError as exc:
        raise TransientModelError(f"{model}: response body is not JSON") from exc
    if not isinstance(raw, dict):
        raise TransientModelError(f"{model}: response body is not a JSON object")
    return raw


async def post_events(
    client: httpx.AsyncClient,
    url: str,
    body: Json,
    *,
    model: str,
    headers: dict[str, str] | None = None,
) -> AsyncGenerator[Json, None]:
    """POST ``body`` to ``url`` and yield each JSON object of the server-sent events it
    answers with, until ``data: [DONE]`` (or until the caller stops at an event that ends
    its protocol's answer); errors as ``post_json``'s, and a stream that ends before either
    or carries something other than JSON objects is transient."""
    with _transport_errors(client, url, model):
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if not 200 <= response.status_code < 300:
                await response.aread()
                raise_for_status(model, response)
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # comments, event names, blank lines between events
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError as exc:
                    raise TransientModelError(f"{model}: stream event is not JSON") from exc
                if not isinstance(event, dict):
                    raise TransientModelError(f"{model}: stream event is not a JSON object")
                yield event
    raise TransientModelError(f"{model}: the stream ended before the answer did")


@contextlib.contextmanager
def _transport_errors(client: httpx.AsyncClient, url: str, model: str) -> Iterator[None]:
    """httpx's failures to reach the server or hear it out, as the adapters' errors."""
    try:
        yield
    except httpx.UnsupportedProtocol as exc:
        raise ModelError(f"{model}: cannot call {url}: {exc}") from exc
    except httpx.TimeoutException as exc:
        raise TransientModelError(f"{model}: timed out after {client.timeout.read}s") from exc
    except httpx.TransportError as exc:
        raise TransientModelError(f"{model}: {type(exc).__name__}: {exc}") from exc


def raise_for_status(model: str, response: httpx.Response) -> None:
    """Raise the error a non-2xx ``response`` means (see the module docstring)."""
    status = response.status_code
    if 200 <= status < 300:
        return
    message = f"{model}: HTTP {status}: {error_message(response)}"
    if status in (408, 429) or status >= 500:
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        raise TransientModelError(message, retry_after=retry_after)
    raise ModelError(message)


def error_message(response: httpx.Response) -> str:
    """The provider's own words: ``{"error": {"message"}}`` (OpenAI, Anthropic, vLLM, Ollama,
    llama.cpp), ``{"error": "..."}``, ``{"message"}`` or ``{"detail"}``; else the start of
    the body."""
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


def parse_retry_after(value: str | None) -> float | None:
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
