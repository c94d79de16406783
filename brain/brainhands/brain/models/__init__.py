"""Model adapters: how the Brain talks to a language model."""

from brainhands.brain.models.anthropic import AnthropicModel
from brainhands.brain.models.base import (
    BackgroundModel,
    KeyedModel,
    ModelAdapter,
    ModelError,
    ModelResponse,
    ToolCall,
    TransientModelError,
)
from brainhands.brain.models.openai import OpenAIChatModel
from brainhands.brain.models.responses import BackgroundResponsesModel, ResponsesModel
from brainhands.brain.models.scripted import ScriptedModel
from brainhands.brain.models.settings import ModelSettings, model_from_settings

__all__ = [
    "AnthropicModel",
    "BackgroundModel",
    "BackgroundResponsesModel",
    "KeyedModel",
    "ModelAdapter",
    "ModelError",
    "ModelResponse",
    "ModelSettings",
    "OpenAIChatModel",
    "ResponsesModel",
    "ScriptedModel",
    "ToolCall",
    "TransientModelError",
    "model_from_settings",
]
