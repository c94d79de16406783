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
from typing import Any, Protocol

from brainhands.shared.errors import BrainhandsError


class ModelError(BrainhandsError):
    """The model call failed in a way another attempt will not fix (bad request, auth)."""


class TransientModelError(ModelError):
    """The model call failed in a way another attempt may fix (429, 5xx, timeout, cut off)."""

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
class ModelResponse:
    """A complete model answer: text, tool calls, or both."""

    raw: dict[str, Any]
    text: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    message: dict[str, Any] = field(default_factory=dict)
    """The answer as the chat-completions message that replays it, when the adapter keeps
    one verbatim; empty: ``as_message`` rebuilds it from ``text`` and ``tool_calls``."""

    def as_message(self) -> dict[str, Any]:
        """The assistant message a later request carries for this answer."""
        if self.message:
            return self.message
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
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


class ModelAdapter(Protocol):
    """Something that completes a conversation."""

    @property
    def name(self) -> str:
        """The model's name, recorded with each request."""
        ...

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelResponse:
        """One model call. Raises ``TransientModelError`` when a retry may help, and
        ``ModelError`` when it will not. Never returns a response that was cut off.

        ``on_text`` is handed the answer's text as it is produced, piece by piece, by an
        adapter that streams (others may hand it the whole text once, or nothing): for
        watchers only. The returned response is what counts, and what is stored."""
        ...

    def parse(self, raw: dict[str, Any]) -> ModelResponse:
        """Rebuild the response from its stored ``raw`` form (after a restart)."""
        ...
