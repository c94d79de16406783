"""Hands: workers that run tools, one pool per kind of tool.

Declare a tool with ``@tool``; run a pool with ``brainhands hands --pool NAME --tools MODULE``.
"""

from brainhands.hands.context import ToolContext
from brainhands.hands.tool import tool
from brainhands.shared.conditions import arg
from brainhands.shared.errors import LeaseLost, ToolError, ToolUncertain
from brainhands.shared.tools import QueryAnswer, ReplayPolicy, RetryPolicy

__all__ = [
    "LeaseLost",
    "QueryAnswer",
    "ReplayPolicy",
    "RetryPolicy",
    "ToolContext",
    "ToolError",
    "ToolUncertain",
    "arg",
    "tool",
]
