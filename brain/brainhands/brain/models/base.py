"""The adapter interface every model sits behind, and what a model call returns.

Messages and tool schemas use the chat-completions shapes (``{"role", "content"}``,
``{"type": "function", "function": {...}}``), the lingua franca of OpenAI, vLLM, Ollama and
llama.cpp's server; an adapter for another protocol (Anthropic's Messages) maps them to its
own. ``ModelResponse.raw`` is the provider's answer exactly as returned: the Brain stores it
before acting on it, so a restart never asks the model to decide again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from brainhands.shared.errors import BrainhandsError

Json = dict[str, Any]
"""A JSON object as an API writes it: a message, a tool schema, a request or answer body."""
TextSink = Callable[[str], None]
"""Where an adapter hands the answer's text as it is produced."""


class ModelError(BrainhandsError):
    """The model call failed in a way another attempt will not fix (bad request, auth)."""


class TransientModelError(ModelError):
    """The model call failed in a way another attempt may fix (429, 5xx, timeout, garbled)."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for."""

    id: str
    """The provider's call id: tool results are matched to calls by it."""
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class TokenCount:
    """The tokens a model call was billed for, read from the provider's ``usage``: what a
    session's budget counts (``brain.budget``)."""

    input: int
    """Prompt tokens, cached ones included (Anthropic counts those apart; they are added)."""
    output: int
    """Generated tokens, reasoning and thinking included."""


@dataclass(frozen=True)
class ModelResponse:
    """A model answer: text, tool calls, or both."""

    raw: Json
    text: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Json = field(default_factory=dict)
    message: Json = field(default_factory=dict)
    """The answer as the message that replays it, when the adapter keeps one verbatim;
    empty: ``as_message`` rebuilds it from ``text`` and ``tool_calls``. Its ``content`` may
    hold the provider's own blocks (Anthropic's thinking and tool use), which only that
    provider's adapter reads back, as they were."""
    tokens: TokenCount | None = None
    """The tokens billed for this answer, read from ``usage`` (None: it reported none)."""
    cut_off: str | None = None
    """The provider's stop reason when the answer stopped at its output-token limit
    (chat completions' ``length``, Anthropic's ``max_tokens``), else None. Such an answer
    is final, not a failure: asking again would stop at the same limit. Its text is whole
    as far as it goes; tool calls it had begun are unfinished, so none is read (the agent's
    ``on_length`` decides what happens next)."""

    def as_message(self) -> Json:
        """The assistant message a later request carries for this answer."""
        if self.message:
            return self.message
        message: Json = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in self.tool_calls
            ]
        return message


def count_tokens(usage: Any, inputs: tuple[str, ...], output: str) -> TokenCount | None:
    """The ``TokenCount`` of a provider's ``usage`` object: the sum of its ``inputs`` counts,
    and its ``output`` count. None when it has no count at all (a server that reports no
    usage); a count that is missing or not a whole number is taken as 0."""
    if not isinstance(usage, dict) or not any(k in usage for k in (*inputs, output)):
        return None

    def read(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return TokenCount(input=sum(read(k) for k in inputs), output=read(output))


class ModelAdapter(Protocol):
    """Something that completes a conversation."""

    @property
    def name(self) -> str:
        """The model's name, recorded with each request."""
        ...

    async def complete(
        self, messages: list[Json], tools: list[Json], *, on_text: TextSink | None = None
    ) -> ModelResponse:
        """One model call. Raises ``TransientModelError`` when a retry may help, and
        ``ModelError`` when it will not. An answer cut off at the output-token limit is
        returned, marked ``cut_off``; one that cannot be read, or that stopped early for
        another reason, is an error.

        ``on_text`` is handed the answer's text as it is produced, piece by piece, by an
        adapter that streams (others may hand it the whole text once, or nothing): for
        watchers only. The returned response is what counts, and what is stored."""
        ...

    def parse(self, raw: Json) -> ModelResponse:
        """Rebuild the response from its stored ``raw`` form (after a restart)."""
        ...


@runtime_checkable
class KeyedModel(ModelAdapter, Protocol):
    """An adapter that can send a call under the Brain's request id (``brain.model_calls``):
    the id every sending of the same request carries, so a provider that honours
    idempotency keys answers a call sent again after a kill with the first one's answer,
    and one that does not is told nothing it minds."""

    async def complete_keyed(
        self,
        messages: list[Json],
        tools: list[Json],
        *,
        request_id: str,
        on_text: TextSink | None = None,
    ) -> ModelResponse:
        """``complete``, the request carrying ``request_id`` as its idempotency key."""
        ...


@runtime_checkable
class BackgroundModel(ModelAdapter, Protocol):
    """An adapter whose calls run on the provider's side apart from the connection that
    asked for them (OpenAI's background responses): ``begin`` starts one and returns its
    id at once, ``attach`` waits for it by that id, from any process. The Brain commits the
    id between the two, so a Brain that dies while the model generates leaves an answer
    another Brain attaches to, paid once (``brain.model_calls``)."""

    async def begin(self, messages: list[Json], tools: list[Json], *, request_id: str) -> str:
        """Start the call (``request_id`` as its idempotency key) and return the provider's
        id of the response it makes. Errors as ``complete``'s."""
        ...

    async def attach(self, response_id: str, *, on_text: TextSink | None = None) -> ModelResponse:
        """Wait for the response ``response_id`` to end, and return it as ``complete``
        does. ``TransientModelError``: it failed, was cancelled or is gone in a way a new
        call may fix (the caller begins another); ``ModelError``: a new call will not."""
        ...
