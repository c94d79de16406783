"""Which model a Brain talks to when an agent names none (``BRAINHANDS_MODEL_*`` variables)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from brainhands.brain.models._http import HttpModel
from brainhands.brain.models.anthropic import AnthropicModel
from brainhands.brain.models.openai import OpenAIChatModel
from brainhands.brain.models.responses import BackgroundResponsesModel, ResponsesModel

__all__ = ["ModelSettings", "model_from_settings"]


class ModelSettings(BaseSettings):
    """The model of agents that name none: a Brain builds it once at start-up."""

    model_config = SettingsConfigDict(env_prefix="BRAINHANDS_MODEL_", extra="ignore")

    provider: Literal["openai", "anthropic", "openai-responses"] = "openai"
    """The protocol ``base_url`` speaks: ``openai`` (chat completions: OpenAI, vLLM, Ollama,
    llama.cpp's server), ``anthropic`` (the Messages API) or ``openai-responses`` (OpenAI's
    Responses API, which can run calls in the background: ``background``)."""
    base_url: str = "http://127.0.0.1:11434/v1"
    """The API root (default: a local Ollama, which speaks both protocols): ``/chat/completions``,
    ``/responses`` or ``/messages`` hang off it; for ``anthropic`` the ``/v1`` may be left out."""
    name: str = "llama3.1"
    api_key: SecretStr | None = None
    timeout: float = Field(default=60.0, gt=0)
    """Seconds one model call may take before it counts as failed (and retryable)."""
    stream: bool = False
    """Ask for the answer as a stream, so the session's watchers see its text as it is
    produced (the answer is stored once complete, as without streaming)."""
    max_tokens: int | None = Field(default=None, gt=0)
    """The longest answer, in tokens (sent as ``max_tokens``). Unset: the server's own limit
    for ``openai``, 4096 for ``anthropic`` (whose API requires one). An answer that reaches
    it is final, and its agent's ``on_length`` says what follows."""
    context_window: int | None = Field(default=None, gt=0)
    """Its context window, in tokens: an agent with no ``ContextPolicy`` has its prompt
    compacted past three quarters of it. Unset: the window known for ``name``
    (``brain.context.KNOWN_WINDOWS``); set it for a model not known there, or served with a
    smaller window (Ollama's ``num_ctx``)."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    """Sampling temperature (unset: the server's default)."""
    background: bool = False
    """For ``openai-responses``: run each model call as a background response, its id
    committed before the Brain waits for it, so a Brain that dies while the model generates
    leaves an answer the next one attaches to, paid once (without it, the call is sent
    again, and the session's usage counts it ``resent``). The answer's text reaches watchers
    whole, once done."""
    poll_interval: float = Field(default=1.0, gt=0)
    """Seconds between two looks at a background response that has not ended."""
    extra_body: Annotated[dict[str, Any], NoDecode] = Field(default_factory=dict)
    """A JSON object merged into every request body last: provider-specific fields
    (``{"thinking": {"type": "enabled", "budget_tokens": 2048}}``), or overrides of the
    adapter's; a field set to ``null`` is left out (``{"parallel_tool_calls": null}`` for a
    server that rejects that field)."""

    @field_validator("extra_body", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        """The variable's JSON text as the object it writes (refused if it is not one)."""
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError as exc:
                raise ValueError(f"not JSON: {exc}") from None
            if not isinstance(value, dict):
                raise ValueError("must be a JSON object ({...})")
        return value


def model_from_settings(settings: ModelSettings) -> HttpModel:
    """The adapter that ``settings`` describe."""
    options: dict[str, Any] = {
        "timeout": settings.timeout,
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "extra_body": settings.extra_body,
        "stream": settings.stream,
    }
    adapter: type[HttpModel] = OpenAIChatModel
    if settings.provider == "anthropic":
        adapter = AnthropicModel
    elif settings.provider == "openai-responses" and settings.background:
        adapter = BackgroundResponsesModel
        options["poll_interval"] = settings.poll_interval
    elif settings.provider == "openai-responses":
        adapter = ResponsesModel
    api_key = settings.api_key.get_secret_value() if settings.api_key else None
    return adapter(settings.base_url, settings.name, api_key, **options)
