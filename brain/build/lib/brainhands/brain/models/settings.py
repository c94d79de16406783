"""Which model a Brain talks to when an agent names none (``BRAINHANDS_MODEL_*`` variables)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

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


def model_from_settings(settings: ModelSettings) -> OpenAIChatModel | AnthropicModel:
    """The adapter that ``settings`` describe."""
    api_key = settings.api_key.get_secret_value() if settings.api_key else None
    if settings.provider == "anthropic":
        return AnthropicModel(
            settings.base_url,
            settings.name,
            api_key,
            timeout=settings.timeout,
            stream=settings.stream,
        )
    return OpenAIChatModel(
        settings.base_url, settings.name, api_key, timeout=settings.timeout, stream=settings.stream
    )
