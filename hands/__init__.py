"""Hands: workers that run tools, one pool per kind of tool.

Declare a tool with ``@tool``; run a pool with ``brainhands hands --pool NAME --tools MODULE``.
"""

from hands.context import ToolContext
from hands.tool import tool
from shared.errors import LeaseLost, ToolError, ToolUncertain
from shared.tools import QueryAnswer, ReplayPolicy, RetryPolicy

__all__ = [
    "LeaseLost",
    "QueryAnswer",
    "ReplayPolicy",
    "RetryPolicy",
    "ToolContext",
    "ToolError",
    "ToolUncertain",
    "tool",
]
