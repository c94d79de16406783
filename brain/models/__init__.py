"""Model adapters: how the Brain talks to a language model."""

from brain.models.base import (
    ModelAdapter,
    ModelError,
    ModelResponse,
    ToolCall,
    TransientModelError,
)

__all__ = ["ModelAdapter", "ModelError", "ModelResponse", "ToolCall", "TransientModelError"]
