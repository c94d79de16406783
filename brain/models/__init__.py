"""Model adapters: how the Brain talks to a language model."""

from brainhands.brain.models.base import (
    ModelAdapter,
    ModelError,
    ModelResponse,
    ToolCall,
    TransientModelError,
)
from brainhands.brain.models.openai import ModelSettings, OpenAIChatModel
from brainhands.brain.models.scripted import ScriptedModel

__all__ = [
    "ModelAdapter",
    "ModelError",
    "ModelResponse",
    "ModelSettings",
    "OpenAIChatModel",
    "ScriptedModel",
    "ToolCall",
    "TransientModelError",
]
