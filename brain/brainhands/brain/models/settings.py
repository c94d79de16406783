"""Which model a Brain talks to when an agent names none (``BRAINHANDS_MODEL_*`` variables)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from brainhands.brain.models.anthropic import AnthropicModel
from brainhands.brain.models.openai import OpenAIChatModel

__all__ = ["ModelSettings", "model_from_settings"]


class ModelSettings(BaseSettings):
    """The model of agents that name none: a Brain builds it once at start-up."""

    model_config = SettingsConfigDict(env_prefix="BRAINHANDS_MODEL_", extra="ignore")

    provider: Literal["openai", "anthropic"] = "openai"
    """The protocol ``base_url`` speaks: ``openai`` (chat completions: OpenAI, vLLM, Ollama,
    llama.cpp's server) or ``anthropic`` (the Messages API)."""
    base_url: str = "http://127.0.0.1:11434/v1"
    """The API root (default: a local Ollama, which speaks both protocols): ``/chat/completions``
    or ``/messages`` hang off it; for ``anthropic`` the ``/v1`` may be left out."""
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
    temperature: float | None = Field(default=None, ge=0, le=2)
    """Sampling temperature (unset: the server's default)."""
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


def model_from_settings(settings: ModelSettings) -> OpenAIChatModel | AnthropicModel:
    """The adapter that ``settings`` describe."""
    adapter = AnthropicModel if settings.provider == "anthropic" else OpenAIChatModel
    return adapter(
        settings.base_url,
        settings.name,
        settings.api_key.get_secret_value() if settings.api_key else None,
        timeout=settings.timeout,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        extra_body=settings.extra_body,
        stream=settings.stream,
    )
