"""One JSON POST to a model's HTTP API (answered with JSON, or with a stream of server-sent
events), with the error contract every HTTP adapter keeps.

Transport failures, timeouts, 408, 429 and 5xx (Anthropic's 529 "overloaded" included) are
``TransientModelError``, carrying the server's ``Retry-After``; other statuses are
``ModelError`` in the provider's own words; a 2xx body that is not a JSON object is transient.
"""

from __future__ import annotations

import contextlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Self

import httpx

from brainhands.brain.models.base import ModelError, ModelResponse, TransientModelError


class HttpModel(ABC):
    """What every adapter over an HTTP API shares: one ``httpx.AsyncClient``, created on
    first use with the provider's ``headers()`` and reused, closed by ``aclose()`` (or
    ``async with``); and a call answered whole (``complete_whole``)."""

    def __init__(self, url: str, model: str, api_key: str | None, timeout: float) -> None:
        self._url = url
        self._model = model
        self._api_key = api_key
        self._timeout = timeout
        self._client: httpx.AsyncClient | None = None

    @property
    def name(self) -> str:
        """The model's name, as sent in each request."""
        return self._model

    def headers(self) -> dict[str, str]:
        """The provider's headers on every request (its authentication, its version)."""
        return {}

    async def aclose(self) -> None:
        """Close the HTTP connections; the next call opens new ones."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @abstractmethod
    def parse(self, raw: dict[str, Any]) -> ModelResponse:
        """Rebuild a response from the JSON the server returned."""

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to the adapter's URL (see ``post_json``)."""
        return await post_json(self.client(), self._url, body, model=self._model)

    async def complete_whole(
        self, body: dict[str, Any], on_text: Callable[[str], None] | None
    ) -> ModelResponse:
        """One call the server answers whole; ``on_text`` gets the whole text once."""
        response = self.parse(await self.post(body))
        if on_text is not None and response.text:
            on_text(response.text)
        return response

    def client(self) -> httpx.AsyncClient:
        """The adapter's HTTP client (made on first use)."""
        if self._client is None:
            self._client = httpx.AsyncClient(headers=self.headers(), timeout=self._timeout)
        return self._client


async def post_json(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], *, model: str
) -> dict[str, Any]:
    """POST ``body`` to ``url`` and return the JSON object answered, exactly as returned."""
    with _transport_errors(client, url, model):
        response = await client.post(url, json=body)
    raise_for_status(model, response)
    try:
        raw = response.json()
    except ValueError as exc:
        raise TransientModelError(f"{model}: response body is not JSON") from exc
    if not isinstance(raw, dict):
        raise TransientModelError(f"{model}: response body is not a JSON object")
    return raw


async def post_events(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], *, model: str
) -> AsyncIterator[dict[str, Any]]:
    """POST ``body`` to ``url`` and yield each JSON object of the server-sent events it
    answers with, until ``data: [DONE]`` (or until the caller stops at an event that ends
    its protocol's answer); errors as ``post_json``'s, and a stream that ends before either
    or carries something other than JSON objects is transient."""
    with _transport_errors(client, url, model):
        async with client.stream("POST", url, json=body) as response:
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
