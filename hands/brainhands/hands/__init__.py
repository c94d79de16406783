"""Hands: workers that run tools, one pool per kind of tool.

Declare a tool with ``@tool``; run a pool with ``brainhands hands --pool NAME --tools MODULE``.
A tool that runs commands declares its ``Sandbox`` and runs them with ``ctx.run``.
"""

from brainhands.hands.context import ToolContext
from brainhands.hands.sandbox import SandboxResult
from brainhands.hands.tool import tool
from brainhands.shared.conditions import arg
from brainhands.shared.errors import LeaseLost, SandboxStopped, ToolError, ToolUncertain
from brainhands.shared.tools import QueryAnswer, ReplayPolicy, RetryPolicy, Sandbox

__all__ = [
    "LeaseLost",
    "QueryAnswer",
    "ReplayPolicy",
    "RetryPolicy",
    "Sandbox",
    "SandboxResult",
    "SandboxStopped",
    "ToolContext",
    "ToolError",
    "ToolUncertain",
    "arg",
    "tool",
]
